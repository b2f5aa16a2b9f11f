"""Leaderboard submissions: ``icir submit`` bundles a run, ``icir leaderboard validate`` checks one.

A submission folder::

    submission.json                 the manifest (`SCHEMA`): schema version, model, protocol record,
                                    versions, tasks, units, dataset fingerprints, submitter, link,
                                    and the sha256 and size of every other file
    results/<results_*.json>        lm-eval's results file(s): the newest holding each task
    heads_ranking.json              the heads_ranking=FILE a transfer run voted with (when it had one)
    artifacts/<task or group>/      the unit's JSON and safetensors artifacts (`harness.artifacts`);
                                    no PNG; writer_probes/ only with ``--probes``

JSON, JSONL and safetensors only: nothing that executes. ``--archive`` also writes
``SUBMISSION.tar.gz``, deterministic (sorted members, mtime 0, uid/gid 0, no names, gzip mtime 0).

`validate` recomputes every reported aggregate it can from the per-document records
(``documents.jsonl``, ``head_records.safetensors``): accuracy, pointer R@1 exact and Eq. 3 (best
head of a discovery task, the transferred ranking's top head on a transfer task), the median head,
the top head, the R@1 grids at the reported position, and vote R@1@K over the vote ranking.
"""
