"""Notifications: a job's phase changes posted to webhooks (spec.notify, --webhook).

`messages.py` renders one notification (json, slack, discord) and signs it;
`outbox.py` takes them from committed events and delivers them, off the broker's loops.
"""
