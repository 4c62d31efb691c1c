"""Who is calling and what they may do: bearer tokens, people (the Unix socket's peer, a
user token's user, a worker's vouching), the middleware that resolves them, and each
route's roles."""
