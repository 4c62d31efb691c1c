"""Who is calling and what they may do: bearer tokens, the middleware that resolves them,
and each route's roles."""
