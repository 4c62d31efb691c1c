"""The broker's API routes, one module per resource: thin, each a call to the controllers."""
