"""The `jobd` program: the assembly of the broker and agent processes (and `jobd token`).

Only `jobd/__main__.py` and the `jobd` console script import this package; the `job`
client (`jobd.cli`) never does.
"""
