"""`job explain`: why a queued job is not running (Slurm's `squeue` reasons, in full).

The broker judges (GET /jobs/{id}/explain, controllers/explain.py: the scheduler's own
rules); this verb only lays its sentences out for a terminal, or prints the document
(`-o json|yaml`).
"""

from __future__ import annotations

from typing import Any

import click

from jobd.cli.options import client, output_option, print_documents
from jobd.cli.targets import Selection, job_targets

__all__ = ["VERBS", "explanation_lines"]

Document = dict[str, Any]


@click.command()
@job_targets
@output_option("text")
def explain(targets: Selection, output: str) -> None:
    """Say why a queued job is not running: each worker, its queue place, preemption.

    For a Pending job: what keeps it from each worker (cordoned, lost, a label or mount
    root, or short of slots, GPUs, GPU memory, CPUs or memory, by how much), how many
    jobs are ahead of it, the jobs it depends on, its retry backoff, its array's cap,
    and which running jobs `job preempt-blockers` would preempt for it. For any other
    job, its phase and why.
    """
    answers: list[Document] = []
    with client() as broker:

        def show(job_id: int) -> None:
            answer = broker.explain_job(job_id)
            if output == "text":
                if answers:
                    click.echo()
                click.echo("\n".join(explanation_lines(answer)))
            answers.append(answer)

        targets.each(broker, show)
    if output != "text":
        print_documents(answers, output, single=targets.single)
    targets.exit_if_failed()


def explanation_lines(answer: Document) -> list[str]:
    """The explanation as a terminal shows it: a heading, then a block per finding."""
    lines = [f"Job {answer['job']}  {answer['name']}  {answer['phase']}"]
    if answer["phase"] != "Pending":
        return [*lines, f"  {answer['summary']}"]
    lines.append(f"  Reason:  {answer['reason']}: {answer['message']}")
    lines += _workers(answer["workers"])
    lines += _block("Queue", [answer["queue"]["says"]] if answer.get("queue") else [])
    dependencies = [d["says"] for d in answer.get("dependencies") or []]
    lines += _block("Depends on", dependencies)
    lines += _block("Retry", [answer["retry"]["says"]] if answer.get("retry") else [])
    lines += _block("Array", [answer["array"]["says"]] if answer.get("array") else [])
    lines += _block("Nodes", [answer["gang"]["says"]] if answer.get("gang") else [])
    lines += _block("Preemption", [answer["preemption"]["says"]])
    return lines


def _workers(workers: list[Document]) -> list[str]:
    if not workers:
        return _block("Workers", ["none registered"])
    width = max(len(w["worker"]) for w in workers)
    lines = ["  Workers:"]
    for worker in workers:
        mark = "fits" if worker["fits"] else "no"
        first, *rest = worker["says"]
        lines.append(f"    {worker['worker']:<{width}}  {mark:<4}  {first}")
        lines += [f"    {'':<{width}}        {said}" for said in rest]
    return lines


def _block(title: str, said: list[str]) -> list[str]:
    if not said:
        return []
    return [f"  {title}:", *(f"    {line}" for line in said)]


VERBS = [explain]
