"""``shmq chaos``: kill -9 loops against a running broker with producers and consumers at
work, then the proof that nothing acknowledged was lost and nothing garbled was served.

``payload.py`` (the body every chaos message carries: its id and a checksum), ``ledger.py``
(the append-only files producers and consumers write), ``actors.py`` (the producer and
consumer processes), ``cluster.py`` (NameServer, broker and slaves: start, kill, restart,
probe), ``run.py`` (the cycles), ``check.py`` (the verdict from the files and the final
drain). The command is ``shmq/cli/chaos.py``; the promise it checks is in docs/reliability.md.
"""
