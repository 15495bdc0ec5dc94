"""One worker's claim engine, in parts with one job each (River's producer, executor, completer).

- ``picker``: which rows the next claim takes (the sweep, rows named by wake-ups, waiting
  items, the pause); pure, it reads nothing.
- ``fetch``: runs the claim statements and the reads the picker's decisions need, and tells
  the picker what it saw.
- ``runner``: hands claimed items to the handler processes (``pool``) and keeps the ones
  claimed ahead.
- ``recorder``: turns what a handler process reported, or how it ended, into the item's
  transition and the wake-ups it owes.
- ``context``: what they share (the worker, the database, the observers).

``dbworker.loop.WorkerLoop`` wires them: wait, pick, fetch, run, record.
"""
