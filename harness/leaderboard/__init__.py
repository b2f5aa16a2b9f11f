"""Leaderboard submissions: bundle a run, check every number, re-run a sample, build the site.

- `bundle`: ``icir submit RUN --out SUB`` (or ``--leaderboard DIR``: into
  ``DIR/results/<org__model>/<revision>/``, `entries`).
- `validate` (with `checks` and `recompute`): ``icir leaderboard validate``.
- `verify`: ``icir leaderboard verify`` (a seeded sample re-run through the eval path).
- `site`: ``icir leaderboard build`` (the static site, from `entries`).

A submission folder::

    submission.json                 the manifest (`schema.SCHEMA`): schema version, model (identity,
                                    architecture, parameter count, dtype, kernel, L x H), protocol
                                    record, versions, tasks, units, dataset fingerprints, inputs,
                                    ablation, submitter, link, and the sha256 and size of every file
    results/<results_*.json>        lm-eval's results file(s): the newest holding each task
    inputs/<unit>/heads_ranking.json, writer_probes.json
                                    what a transfer unit voted with (§4.3), naming the unit of this
                                    run that made it
    artifacts/<task or group>/      the unit's JSON and safetensors artifacts (`harness.artifacts`),
                                    per-document records included; no PNG; writer_probes/ only
                                    with ``--probes``
    ablation/                       the run's ``icir ablate`` grid, when it has one: grid.json,
                                    cells.json, protocol.json, outcomes/<task>.jsonl

JSON, JSONL and safetensors only: nothing that executes. ``--archive`` also writes
``SUBMISSION.tar.gz``, deterministic (sorted members, mtime 0, uid/gid 0, no names, gzip mtime 0).
"""
