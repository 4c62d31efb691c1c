"""The broker's HTTP protocol, owned in one place: routes, bodies, answers and clients.

The broker declares its routes from `routes` and parses with `models`; the worker and
the CLI build their requests from the same declarations (`calls`) and send them with one
of the clients of `client`. Above the clients sit what every follower of jobs and every
worker share: `informer`, the one list-then-watch, and `reports`, the batched, fenced
reports. This package imports only pydantic, httpx (and anyio, which httpx brings) and
`jobd.api`, so the worker that uses it stays light.

The package imports none of its modules: a client that sends calls (`calls`, `client`)
never loads the models (`models`, pydantic) the broker parses bodies with.
"""
