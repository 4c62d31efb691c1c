"""`jobd bench`: the built-in benchmark, in the spirit of pgbench and redis-benchmark.

`runner` picks the scenarios, runs each under a time budget and renders the results;
`context` is what a scenario is handed; `harness` starts real brokers and workers as
subprocesses on free ports in a temporary directory. The scenarios live one family per
module: `api` (submit, apply), `dispatch` (dispatch, drain), `preempt`, `scale` and
`reconcile`. `calls` and `wire` are how they talk to a broker, `stats` turns samples
into the figures every scenario reports, and `progress` is what stderr shows meanwhile.
"""

__all__: list[str] = []
