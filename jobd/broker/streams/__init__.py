"""What flows out of the broker as it happens: the change feed watchers long-poll, job output
and when it arrived, and events.jsonl."""
