"""The analysis stage around lm-eval's results: `harness.analysis` in, metrics and artifacts out.

`analyze_results` is the one step that runs after every evaluation (``icir eval``,
`harness.evaluate`) and in ``icir analyze RUN_FOLDER`` on a finished run (a plain ``lm_eval``
run with ``store=DIR`` included): it reads the run's documents from the activation store once
(`harness.analysis.analyse_run`), writes the artifacts (`harness.artifacts`), adds the head
metrics to lm-eval's results dict (``results`` and ``groups`` sections, key ``<metric>,none``,
so lm-eval's table and results JSON show them) and annotates lm-eval's logged samples with each
document's record (answer, correctness, target image, the top pointer head's pick; no paths).

It runs in two steps, so nothing is written before every input was read and checked:
`stage_analysis` computes and checks (the unit folders included), `write_analysis` writes.
``icir analyze`` first refuses a store that did not capture the run it analyses (`check_store`:
the store's model identity and capture settings against the run's protocol record).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import activation_store
from harness.activation_store import SETTINGS_FILE
from harness.analysis import HeadAnalysis, RunAnalysis, RunSpec, analyse_run, run_units
from harness.artifacts import pointer_values, summary, write_artifacts, write_text_artifacts
from harness.constants import (
    POINTER_INDEX_METRICS,
    POINTER_METRICS,
    VOTE_METRICS,
    WRITER_METRICS,
    WRITER_VOTE_METRICS,
)
from harness.metrics.rankings import top_head_values
from harness.protocol import (
    PROTOCOL_POINTER_MODE,
    analysis_writer_config,
    merged_token_summary,
    protocol_record,
    write_protocol,
)
from icir_common import UserInputError


def run_spec(results: dict, model_args: dict[str, Any]) -> RunSpec:
    """The `RunSpec` of an lm-eval run: its store, and each stored task's evaluated document count.

    Raises:
        UserInputError: the run had no ``store`` folder (a temporary store is gone after the run)
            or the folder holds no settings file.
    """
    store = model_args.get("store")
    if not store or not (Path(store) / SETTINGS_FILE).is_file():
        raise UserInputError(
            f"the run's activation store {store or '(temporary)'} is not there: head metrics are computed from it, "
            f"so run with --model_args store=DIR (icir eval sets it with --output_path)"
        )
    shards = Path(store) / "shards"
    tasks = {
        task: int(counts["effective"])
        for task, counts in sorted(results.get("n-samples", {}).items())
        if (shards / task).is_dir()
    }
    return RunSpec(Path(store), tasks, model_args.get("heads_ranking"), model_args.get("writer_probes"),
                   analysis_writer_config(model_args, read_capture_settings(Path(store))),
                   model_args.get("pointer_mode", PROTOCOL_POINTER_MODE))


def _table_values(analysis: HeadAnalysis) -> dict[str, float | int]:
    """The unit's metrics for lm-eval's table: `POINTER_METRICS` that are defined, votes, writer."""
    pointer = pointer_values(analysis)
    values: dict[str, float | int] = {m: pointer[m] for m in POINTER_METRICS if pointer[m] is not None}
    values.update({metric: analysis.vote_r1[int(metric.split("@")[1])] for metric in VOTE_METRICS})
    if analysis.writer_r1 is not None:
        values["writer_r1"] = analysis.writer_best
    if analysis.writer_vote_r1 is not None:
        values.update({m: analysis.writer_vote_r1[int(m.split("@")[1])] for m in WRITER_VOTE_METRICS})
    return values


# lm-eval's table marks a metric with an arrow when higher is better; indices and chance get none.
HIGHER_IS_BETTER = {
    **dict.fromkeys(POINTER_METRICS + WRITER_METRICS + VOTE_METRICS + WRITER_VOTE_METRICS, True),
    **dict.fromkeys(POINTER_INDEX_METRICS, None),
}


def add_to_results(results: dict, analyses: dict[str, HeadAnalysis]) -> None:
    """Put each unit's head metrics into lm-eval's ``results`` (and ``groups``) rows, in place."""
    for name, analysis in analyses.items():
        table = _table_values(analysis)
        values = {f"{metric},none": value for metric, value in table.items()}
        for section in ("results", "groups"):
            if name in results.get(section, {}):
                results[section][name].update(values)
        better = results.setdefault("higher_is_better", {}).setdefault(name, {})
        better.update({metric: HIGHER_IS_BETTER[metric] for metric in table})


def annotate_samples(samples: dict[str, list[dict]], run: RunAnalysis) -> None:
    """Add each document's record (`analysis.document_records`) to lm-eval's logged samples, in place."""
    for task, logged in samples.items():
        by_id = {row["doc_id"]: row for row in run.documents.get(task, [])}
        for sample in logged:
            row = by_id.get(int(sample["doc_id"]))
            if row is not None:
                sample.update({key: value for key, value in row.items() if key != "doc_id"})


def _same_run(old: dict, new: dict, tasks: list[str]) -> bool:
    """Whether two protocol records describe the same run of `tasks` (settings, model, documents)."""
    def key(record):
        return (record["settings"], {k: record["model"].get(k) for k in ("weights_sha256", "commit", "dtype")},
                {task: record["datasets"].get(task) for task in tasks})
    return key(old) == key(new)


def _check_unit_folder(folder: Path, record: dict, tasks: list[str], overwrite: bool) -> bool:
    """Whether `folder` holds another run's artifacts that must be replaced (only with `overwrite`).

    Reads only: the folder is removed by `write_analysis`, after every check of the command.

    Raises:
        UserInputError: the folder holds another run's artifacts and `overwrite` is not given.
    """
    from harness.protocol import PROTOCOL_FILE

    old_file = folder / PROTOCOL_FILE
    if not folder.exists():
        return False
    try:
        same = _same_run(json.loads(old_file.read_text()), json.loads(json.dumps(record)), tasks)
    except (OSError, ValueError, KeyError, TypeError):
        same = False
    if same:
        return False
    if not overwrite:
        raise UserInputError(
            f"{folder} holds the artifacts of another run (other settings, model or documents); pass --overwrite "
            f"(icir eval / icir analyze) to replace that folder, or choose another --output_path"
        )
    return True


def read_capture_settings(store: Path) -> dict[str, Any]:
    """The capture settings of the activation store folder `store` (its ``capture_settings.json``).

    Raises:
        UserInputError: the file is missing, or unreadable or not a JSON object (cut or edited;
            `activation_store.read_capture_settings`), naming it.
    """
    settings = activation_store.read_capture_settings(store)
    if settings is None:
        raise UserInputError(f"{store} is no activation store (it holds no {SETTINGS_FILE}); name the store folder "
                             f"the run captured into (its store=DIR)")
    return settings


# The parts of a protocol record (`protocol.protocol_record`) that an activation store's capture
# settings fix, compared by `check_store`: the model's identity and shape (``model``), and how
# every capture was made (``settings``; and ``settings.pointer_scores.eq3``, the Eq. 3 variant).
# The analysis settings beside them (pointer mode, writer probes, rankings, limit) are the run's
# arguments, not the store's.
STORE_MODEL_FACTS = ("name", "source", "weights_sha256", "commit", "revision", "dtype", "attn_implementation",
                     "architecture", "model_type", "n_layers", "n_heads", "hidden_size", "n_parameters")
STORE_SETTING_FACTS = ("readout", "image_inputs", "chat_template_sha256")


def store_facts(record: dict) -> dict[str, Any]:
    """The `STORE_MODEL_FACTS` and `STORE_SETTING_FACTS` a protocol record holds, flat:
    ``model.<key>``, ``settings.<key>`` (``image_inputs`` one entry per key, e.g.
    ``settings.image_inputs.side``) and ``settings.pointer_scores.eq3``. A key the record does not
    hold is left out (a record made before that key was recorded)."""
    model, settings = record.get("model") or {}, record.get("settings") or {}
    facts = {f"model.{key}": model[key] for key in STORE_MODEL_FACTS if key in model}
    for key in STORE_SETTING_FACTS:
        value = settings.get(key)
        if isinstance(value, dict):
            facts.update({f"settings.{key}.{inner}": item for inner, item in value.items()})
        elif key in settings:
            facts[f"settings.{key}"] = value
    if "eq3" in (settings.get("pointer_scores") or {}):
        facts["settings.pointer_scores.eq3"] = settings["pointer_scores"]["eq3"]
    return facts


# The `store_facts` a results JSON's config states (`_arguments_facts`), when its values are set.
ARGUMENT_FACTS = ("model.name", "model.dtype", "model.revision", "model.attn_implementation", "settings.readout",
                  "settings.pointer_scores.eq3", "settings.image_inputs.side", "settings.image_inputs.side_source")


def _arguments_facts(results: dict, model_args: dict[str, Any]) -> dict[str, Any]:
    """The `ARGUMENT_FACTS` lm-eval's results JSON states, protocol record or not: from its
    ``config.model_args`` the model name (``pretrained``, default the demo model), readout,
    Eq. 3 variant (``pointer_mode``), image side (``image_budget``, or the one the model folder
    declares) and an ``attn_implementation`` given; from lm-eval's model info in ``config`` the
    loaded dtype and revision.

    Raises:
        UserInputError: a ``readout`` or ``image_budget`` the model could not have run with.
    """
    from harness.demo_model import default_model_path
    from harness.lm_eval_plugin.model import image_side, parse_readout
    from harness.metrics.writer import WriterProbeConfig

    config = results.get("config") or {}
    pretrained = str(model_args.get("pretrained") or default_model_path())
    side, side_source = image_side(model_args.get("image_budget"), pretrained)
    stated: dict[str, Any] = {
        "model": pretrained,
        "readout": list(parse_readout(model_args.get("readout", "cattok"))),
        "eq3": "proxy_causal" if model_args.get("pointer_mode") == "proxy_causal" else "proxy",
        "attn_implementation": model_args.get("attn_implementation"),
        "dtype": None if not config.get("model_dtype") else str(config["model_dtype"]),
        "identity": {"revision": config.get("model_revision") or None},
        "image_inputs": {"side": side, "side_source": side_source},
    }
    facts = store_facts(protocol_record(stated, {}, {}, {}, WriterProbeConfig()))
    return {key: facts[key] for key in ARGUMENT_FACTS if facts.get(key) is not None}


def recorded_facts(results: dict, model_args: dict[str, Any], results_file: Path, artifacts_dir: Path | None,
                   overwrite: bool) -> list[tuple[str, dict[str, Any]]]:
    """``[(source, facts)]``: what the run's protocol record says about its store (`store_facts`).

    The sources, each compared on its own: the results JSON's ``icir.protocol`` (written by the
    analysis that produced its head metrics); when it has none, the ``protocol.json`` of each of
    its unit folders under `artifacts_dir` that reads (not with `overwrite`, which declares those
    folders another run's); always, what its ``config`` states (`_arguments_facts`).
    """
    from harness.protocol import PROTOCOL_FILE

    sources = []
    record = (results.get("icir") or {}).get("protocol")
    if isinstance(record, dict):
        sources.append((f"{results_file} (icir.protocol)", store_facts(record)))
    elif artifacts_dir is not None and not overwrite:
        for name in run_units(sorted(results.get("n-samples", {})))[0]:
            try:
                unit = json.loads((Path(artifacts_dir) / name / PROTOCOL_FILE).read_text())
            except (OSError, ValueError):
                continue  # no folder, or one `_check_unit_folder` refuses as another run's
            if isinstance(unit, dict):
                sources.append((str(Path(artifacts_dir) / name / PROTOCOL_FILE), store_facts(unit)))
    sources.append((f"{results_file} (config.model_args)", _arguments_facts(results, model_args)))
    return sources


def _short(value: Any) -> str:
    """`value` for a one-line message: its repr, cut after 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_store(store: Path, results: dict, model_args: dict[str, Any], results_file: Path,
                artifacts_dir: Path | None, overwrite: bool = False) -> None:
    """Refuse an activation store that did not capture the run of `results_file`.

    The store's capture settings become a protocol record the way the analysis makes one
    (`protocol.protocol_record`), and its `store_facts` must equal every fact each source of
    `recorded_facts` holds: the model's name, source, weights sha256 (a local folder) or Hub
    commit, revision, dtype, attention kernel, architecture, model type, layers x heads, hidden
    size and parameter count, and the readout positions, image inputs, chat template hash and Eq. 3
    variant. Paths are not compared: a moved run folder or model folder is the same run.

    Raises:
        UserInputError: see `read_capture_settings`; a fact that differs (the message names the
            store, the source and up to three differing facts).
    """
    from harness.metrics.writer import WriterProbeConfig

    stored = store_facts(protocol_record(read_capture_settings(store), {}, {}, {}, WriterProbeConfig()))
    for source, facts in recorded_facts(results, model_args, results_file, artifacts_dir, overwrite):
        differ = [key for key, value in facts.items() if stored.get(key) != value]
        if differ:
            shown = "; ".join(f"{key} {_short(stored.get(key))} there, {_short(facts[key])} in the run"
                              for key in differ[:3])
            raise UserInputError(
                f"activation store {store} did not capture the run of {source}: {shown}"
                f"{' ...' if len(differ) > 3 else ''}; pass --store DIR naming the store that run captured into"
            )


@dataclass
class StagedAnalysis:
    """One run's analysis, computed and checked, not yet written (`stage_analysis`, `write_analysis`).

    Attributes:
        run: the per-unit analyses, document records and text-needle results.
        record: the run's protocol record (``protocol.json``).
        artifacts_dir: folder of the unit folders, or None for none.
        replace: unit folders of another run that `write_analysis` removes first (``--overwrite``).
        summaries: ``{task or group name: summary}`` (`artifacts.summary`).
    """

    run: RunAnalysis
    record: dict
    artifacts_dir: Path | None
    replace: list[Path]
    summaries: dict[str, dict]


def stage_analysis(results: dict, model_args: dict[str, Any], artifacts_dir: Path | None,
                   overwrite: bool = False) -> StagedAnalysis:
    """Compute the analysis stage of lm-eval's `results` and check its unit folders; write nothing.

    `results` gets its head metrics, its samples' records and ``results["icir"]`` in place (see
    `analyze_results`); the artifacts wait for `write_analysis`.

    Raises:
        UserInputError: see `run_spec` and `analysis.analyse_run`; a unit folder of another run
            without `overwrite`.
    """
    spec = run_spec(results, model_args)
    settings = read_capture_settings(spec.store)
    run = analyse_run(spec, tuple(settings["readout"]), settings)
    record = protocol_record(settings, model_args, results, run.datasets, spec.writer_config)
    replace = []
    if artifacts_dir is not None:
        units = {name: analysis.tasks for name, analysis in run.analyses.items()} | {task: [task] for task in run.text}
        replace = [Path(artifacts_dir) / name for name, tasks in units.items()
                   if _check_unit_folder(Path(artifacts_dir) / name, record, tasks, overwrite)]
    summaries = {}
    for name, analysis in run.analyses.items():
        summaries[name] = summary(analysis, name)
        tokens = [run.datasets[task]["visual_tokens_per_image"] for task in analysis.tasks]
        summaries[name]["visual_tokens_per_image"] = merged_token_summary(tokens)
    text_heads = {}
    for task, text in run.text.items():
        text_heads[task] = top_head_values(text.grids[text.primary], 5)
        results["results"].setdefault(task, {})["needle_mass_top,none"] = text_heads[task][0][1]
    add_to_results(results, run.analyses)
    if results.get("samples"):
        annotate_samples(results["samples"], run)
    results["icir"] = {"artifacts": None if artifacts_dir is None else str(artifacts_dir), "summaries": summaries,
                       "protocol": record, "text_heads": text_heads}
    return StagedAnalysis(run, record, None if artifacts_dir is None else Path(artifacts_dir), replace, summaries)


def write_analysis(staged: StagedAnalysis) -> None:
    """Write a staged analysis's artifacts and ``protocol.json`` into its unit folders (none without
    an artifacts folder), first removing the folders of another run it replaces."""
    if staged.artifacts_dir is None:
        return
    for folder in staged.replace:
        shutil.rmtree(folder)
    for name, analysis in staged.run.analyses.items():
        write_artifacts(analysis, staged.artifacts_dir / name, name, staged.run.documents.get(name))
        write_protocol(staged.artifacts_dir / name, staged.record)
    for task, text in staged.run.text.items():
        write_text_artifacts(text, staged.artifacts_dir / task)
        write_protocol(staged.artifacts_dir / task, staged.record)


def analyze_results(results: dict, model_args: dict[str, Any], artifacts_dir: Path | None,
                    overwrite: bool = False) -> dict[str, dict]:
    """Run the analysis stage on lm-eval's `results`; add metrics, samples' records, artifacts
    (`stage_analysis`, then `write_analysis`: nothing is written before every check passed).

    Args:
        results: lm-eval's results dict (``n-samples``, ``results``, ``groups``, and
            ``samples`` when logged); updated in place, plus ``results["icir"]``.
        model_args: the ``hf-multimodal-heads`` arguments of the run (``store``,
            ``heads_ranking``, ``writer_probes``).
        artifacts_dir: folder of the per-unit artifact folders, or None for none.
        overwrite: replace a unit folder that holds another run's artifacts (else refused).

    Returns:
        ``{task or group name: summary}`` (`artifacts.summary`); the run's protocol record
        (`harness.protocol`) is ``results["icir"]["protocol"]`` and each unit's
        ``artifacts_dir/<unit>/protocol.json``; a text needle task's top-5 heads by needle mass
        are ``results["icir"]["text_heads"][task]`` (its artifacts: `artifacts.write_text_artifacts`).

    Raises:
        UserInputError: see `stage_analysis`.
    """
    staged = stage_analysis(results, model_args, artifacts_dir, overwrite)
    write_analysis(staged)
    return staged.summaries


def _number(value: float | None) -> str:
    """A correlation for the summary line: two decimals, or "undefined" (a constant grid)."""
    return "undefined" if value is None else f"{value:.2f}"


def format_summaries(summaries: dict[str, dict], artifacts_dir: str | Path | None,
                     text_heads: dict[str, list] | None = None) -> str:
    """Human-readable head summary printed after lm-eval's table ("" without head metrics);
    `text_heads`: the text needle tasks' top heads by needle mass (``results["icir"]["text_heads"]``)."""
    lines = []
    for task, heads in (text_heads or {}).items():
        top = ", ".join(f"{head} {mass:.3f}" for head, mass in heads)
        lines.append(f"\nText retrieval heads ({task}, mean attention mass on the needle at the last prefill "
                     f"token; App. K): {top}")
    if not summaries:
        return "\n".join(lines)
    lines += ["", "Head metrics (readout position; pointer_r1 under the ranking score and exact (Eq. 1), median, "
                  "chance; top-5 heads by the ranking score):"]
    for name, s in summaries.items():
        top = ", ".join(f"{head} {r1:.3f}" for head, r1 in s["top_pointer_heads"][:5])
        writer = "" if s["writer_r1"] is None or math.isnan(s["writer_r1"]) else f"  writer_r1 {s['writer_r1']:.3f}"
        if s["pointer_r1"] is None:
            pointer = (f"pointer_r1_oracle {s['pointer_r1_oracle']:.3f} ({s['pointer_oracle_head']}, "
                       f"selected on the evaluation data)")
        else:
            pointer = (f"pointer_r1 {s['pointer_r1']:.3f} ({s['pointer_top_head']}, {s['ranking_score']}) "
                       f"exact {s['pointer_r1_exact']:.3f} ({s['pointer_top_head_exact']})")
            if s["pointer_r1_oracle"] is not None:
                pointer += f"  oracle {s['pointer_r1_oracle']:.3f} ({s['pointer_oracle_head']})"
        lines.append(
            f"  {name:<16} {s['position']:<6} {pointer}  median {s['pointer_r1_median']:.3f}  "
            f"chance {s['chance_r1']:.3f}{writer}  exact~eq3 spearman {_number(s['pointer_rank_spearman'])}  top: {top}"
        )
        tokens = s.get("visual_tokens_per_image")
        if tokens:
            lines.append(f"    visual tokens per image: min {tokens['min']}, mean {tokens['mean']:.1f}, "
                         f"max {tokens['max']}")
        lines.extend(f"    note: {note}" for note in s["notes"])
    if artifacts_dir is not None:
        lines.append(f"Artifacts (grids, rankings, per-document records, writer probes, plots): {artifacts_dir}")
    return "\n".join(lines)
