"""``netcheck engine calibrate`` (netcheck.engines.calibrate, colocate, calibrate_report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netcheck.capacity import capacity_status
from netcheck.config import DEFAULT_PROFILES_DIR, DeadlineParams, load_profile
from netcheck.engines.calibrate import (
    batch_flops,
    model_shape,
    run_calibration,
    t_k_warnings,
)
from netcheck.engines.calibrate_report import render_markdown, replace_tables, toml_tables
from netcheck.engines.colocate import KRun, outputs_digest
from netcheck.errors import EngineError

SHAPE = {"hidden": 4, "layers": 1, "intermediate": 8, "heads": 2, "kv_heads": 2, "vocab": 10}


def test_batch_flops_by_hand() -> None:
    """Projections, causal attention, LM head at the last position, decode steps."""
    # prefill 2*320 + 2*1*2*2*4 + 80 = 752; one decode step 320 + 4*3*4 + 80 = 448
    assert batch_flops(SHAPE, 1, 2, 2) == 1200.0
    assert batch_flops(SHAPE, 3, 2, 2) == 3 * 1200.0  # linear in B


def test_model_shape_reads_config_and_fails_clearly(tmp_path: Path) -> None:
    """config.json fields, num_key_value_heads defaulting to the heads; a clear error."""
    cfg = {"hidden_size": 8, "num_hidden_layers": 2, "intermediate_size": 16,
           "num_attention_heads": 2, "vocab_size": 258}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert model_shape(tmp_path)["kv_heads"] == 2
    with pytest.raises(EngineError, match="model shape"):
        model_shape(tmp_path / "missing")


def test_krun_median_and_exactness() -> None:
    """t(k) is the median makespan; exact only when every identity matched every trial."""
    run = KRun(2, "processes", [3.0, 1.0, 2.0], [["a", "a"], ["b", "b"], ["c", "c"]])
    assert run.t_s == 2.0 and run.exact(["a", "b", "c"])
    assert not run.exact(["a", "b", "x"]) and not KRun(2, "streams").exact([])
    assert KRun(2, "streams").t_s is None
    assert outputs_digest([[1, 2]]) != outputs_digest([[1, 3]])


def _result() -> dict[str, object]:
    prof = load_profile("cpu-tiny")
    return {
        "profile": prof.model_dump(mode="json"), "cpu": True, "card": "cpu (x86_64)",
        "software": "torch", "date": "2026-11-30", "host": "h", "wall_s": 1.0,
        "times_s": [1.0, 1.1, 1.2], "t_ref_s": 1.1, "p99_s": 1.2,
        "deadline": {"t_ref_s": 1.1, "a": 1.2, "b": 1.1, "p99_s": 1.2, "slack_s": 0.02,
                     "max_rtt_s": 0.05},
        "deadline_s_rtt0": 1.34, "deadline_s_max_rtt": 1.44,
        "achieved_flops": 1e9, "peak_bf16_flops": 2e9, "flops_fraction": 0.5,
        "batch_flops": 1.1e9,
        "colocation": [{"k": 2, "packing": "processes", "t_s": 2.2, "makespans_s": [2.2],
                        "error": None, "exact_outputs": True}],
        "t_k_s": [1.1, 2.2], "beta": [1.0], "margin": 1.53,
        "capacity": {"t_s": [1.1, 2.2], "beta": [1.0], "margin": 1.53, "flops_fraction": 0.5,
                     "peak_tflops": 0.002, "packing": "processes", "card": "cpu (x86_64)",
                     "date": "2026-11-30", "software": "torch"},
    }  # fmt: skip


def test_tables_replace_the_profile_tables(tmp_path: Path) -> None:
    """The written [deadline]/[capacity] replace the old ones and load as a valid profile."""
    result = _result()
    text = (DEFAULT_PROFILES_DIR / "cpu-tiny.toml").read_text()
    tables = toml_tables(result)
    assert "CPU figures" in tables
    new = replace_tables(replace_tables(text, tables), tables)  # idempotent
    assert new.count("[deadline]") == 1 and new.count("[capacity]") == 1
    path = tmp_path / "cpu-tiny.toml"
    path.write_text(new)
    prof = load_profile(path)
    assert prof.deadline.a == 1.2 and prof.capacity is not None
    assert prof.capacity.t_s == [1.1, 2.2] and prof.capacity.packing == "processes"
    assert capacity_status(prof).margin == pytest.approx(2.2 / prof.deadline_s(0.05))
    md = render_markdown(result, "netcheck engine calibrate --profile cpu-tiny")
    assert "(CPU figures)" in md and "| 1.1000 | 2.2000 | 1.00 | 1.53 |" in md


def test_tables_carry_the_coupling(tmp_path: Path) -> None:
    """A deadline derived with a coupling writes it into [deadline]: the loaded profile's
    D and margin include it, and the markdown states it."""
    result = _result()
    result["deadline"] = {**result["deadline"], "coupling": 0.2}  # type: ignore[dict-item]
    tables = toml_tables(result)
    assert "coupling = 0.2" in tables and "(1 + coupling)" in tables
    path = tmp_path / "cpu-tiny.toml"
    path.write_text(replace_tables((DEFAULT_PROFILES_DIR / "cpu-tiny.toml").read_text(), tables))
    prof = load_profile(path)
    assert prof.deadline.coupling == 0.2
    assert prof.deadline_s(0.05) == pytest.approx(1.32 * 1.2 + 0.1 + 0.02)
    assert "coupling 0.2," in render_markdown(result, "x")
    assert "coupling 0.0," in render_markdown(_result(), "x")  # a result from before it


def test_calibrate_command_passes_the_coupling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``engine calibrate`` derives the deadline with --coupling, 0.2 by default; a value
    outside [0, 1) is refused before anything runs."""
    from click.testing import CliRunner

    from netcheck.cli import main
    from netcheck.engines import calibrate

    seen: list[float] = []

    def fake(profile: object, **kw: object) -> dict[str, object]:
        seen.append(kw["coupling"])  # type: ignore[arg-type]
        return _result()

    monkeypatch.setattr(calibrate, "run_calibration", fake)
    args = ["engine", "calibrate", "--profile", "cpu-tiny", "--out", str(tmp_path)]
    for extra, want in (([], 0.2), (["--coupling", "0.1"], 0.1)):
        result = CliRunner().invoke(main, args + extra)
        assert result.exit_code == 0, result.output
        assert seen[-1] == want
    result = CliRunner().invoke(main, args + ["--coupling", "1.0"])
    assert result.exit_code == 2 and "--coupling" in result.output and len(seen) == 2
    help_text = CliRunner().invoke(main, ["engine", "calibrate", "--help"]).output
    assert "co-hosting" in help_text and "docs/detection.md" in " ".join(help_text.split())


def test_flops_line_readable_on_a_cpu() -> None:
    """CPU-sized FLOP/s show significant digits, not "0.0 TFLOP/s", and a fraction above
    100% (bf16 peak slower than the float32 model) says why; a GPU-like one does not."""
    cpu = {**_result(), "achieved_flops": 6.07e9, "peak_bf16_flops": 9.2e8, "flops_fraction": 6.6}
    md = render_markdown(cpu, "netcheck engine calibrate --profile cpu-tiny")
    assert "0.00607 TFLOP/s of a measured bf16 matmul peak of 0.00092 TFLOP/s = 660.0%" in md
    assert "Above 100%" in md
    assert "Above 100%" not in render_markdown(_result(), "x")


def test_t_k_below_t1_is_a_warning_naming_cause_and_remedy() -> None:
    """t(2) < t(1) (the noisy-CPU figures of s15: 0.263 < 0.320, beta -0.18) is a warning
    naming the cause (a noisy host) and the remedy (an idle host, more trials); t(k) that
    never falls gives none."""
    assert t_k_warnings([0.32, 0.5, 0.7], cpu=True) == []
    assert t_k_warnings([0.32, 0.32], cpu=False) == []
    (w,) = t_k_warnings([0.320, 0.263], cpu=True)
    assert "t(2) = 0.2630 s is below t(1) = 0.3200 s (beta(2) = -0.18)" in w
    assert "noisy host" in w and "CPU figures" in w
    assert "idle host" in w and "--trials" in w and "engine pool` refuses" in w
    (w3,) = t_k_warnings([0.3, 0.6, 0.5], cpu=False)
    assert w3.startswith("t(3) = 0.5000 s is below t(2)") and "card" in w3
    assert "refuses" not in w3  # pool checks t(2) against t(1) only


def test_calibrate_command_warns_when_t2_is_below_t1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``engine calibrate`` shows the t(k) warning on stderr and in the markdown, and the
    JSON record carries it (``t_k_suspect``); it still exits 0, like the margin checks."""
    from click.testing import CliRunner

    from netcheck.cli import main
    from netcheck.engines import calibrate

    noisy = _result()
    noisy["t_k_s"] = [0.320, 0.263]
    noisy["beta"] = [-0.18]
    noisy["warnings"] = t_k_warnings([0.320, 0.263], cpu=True)
    noisy["t_k_suspect"] = True
    monkeypatch.setattr(calibrate, "run_calibration", lambda *_a, **_k: noisy)
    args = ["engine", "calibrate", "--profile", "cpu-tiny", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "warning: t(2) = 0.2630 s is below t(1)" in result.stderr
    md = (tmp_path / "cpu-tiny.md").read_text()
    assert "**Warning: t(2) = 0.2630 s is below t(1)" in md
    record = json.loads((tmp_path / "cpu-tiny.json").read_text())
    assert record["t_k_suspect"] is True and "noisy host" in record["warnings"][0]
    assert "Warning" not in render_markdown(_result(), "x")


@pytest.mark.slow
def test_run_calibration_on_cpu() -> None:
    """The whole calibration on the CPU: t(1), two identities as two processes with exact
    outputs, the deadline from the spread, a valid [capacity] record labelled CPU."""
    prof = load_profile("cpu-tiny").model_copy(
        update={"batch_size": 4, "max_new_tokens": 4, "prompt_len": 48, "prompt_chars": 47}
    )
    steps: list[str] = []
    result = run_calibration(
        prof, batches=2, trials=1, max_k=2, selftest=False, coupling=0.2,
        progress=lambda text, _f: steps.append(text),
    )  # fmt: skip
    assert result["cpu"] is True and result["card"].startswith("cpu")
    procs = [r for r in result["colocation"] if r["packing"] == "processes"]
    assert procs and procs[0]["exact_outputs"] is True and procs[0]["t_s"] > 0
    streams = [r for r in result["colocation"] if r["packing"] == "streams"]
    assert "not applicable on a CPU" in streams[0]["error"]
    assert len(result["t_k_s"]) == 2 and result["capacity"]["packing"] == "processes"
    assert result["deadline"]["a"] >= 1.1 and result["flops_fraction"] > 0
    assert result["deadline"]["coupling"] == 0.2  # the margin is taken at that deadline
    d = prof.model_copy(update={"deadline": DeadlineParams(**result["deadline"])})
    assert result["margin"] == pytest.approx(result["t_k_s"][1] / d.deadline_s(0.05))
    assert steps[0] == "loading the engine" and steps[-1] == "done"
    assert result["t_k_suspect"] is bool(result["warnings"])


def test_update_keeps_the_profiles_comments_and_layout() -> None:
    """``--update-profile`` dropped every hand-written comment inside [deadline] and
    [capacity] (it cut the tables out and appended new ones). Now comment lines, blank
    lines and inline comments stay where they were, the provenance line is replaced,
    stale keys go, and the file outside the tables is unchanged."""
    profile = (
        '# head comment\nname = "x"  # the name\n\n'
        "[deadline]\n"
        "# measured by an old run, 2026-01-01\n"
        "t_ref_s = 2.0                 # reference time of one batch\n"
        "a = 1.5\n"
        "# hand: b was raised after the s9 incident, keep >= 1.2\n"
        "b = 1.2\n"
        "\n"
        "old_key = 7\n"
        "slack_s = 0.5\n\n"
        "[other]\n"
        "x = 1  # keep me\n"
    )
    tables = toml_tables(_result())
    new = replace_tables(profile, tables)
    assert new.startswith('# head comment\nname = "x"  # the name\n\n[deadline]\n# CPU figures')
    assert "# measured by an old run" not in new
    assert "t_ref_s = 1.1                 # reference time of one batch\n" in new
    assert "# hand: b was raised after the s9 incident, keep >= 1.2\nb = 1.1\n" in new
    assert "old_key" not in new and "slack_s = 0.02" in new
    assert (
        new.index("[deadline]") < new.index("[other]\nx = 1  # keep me\n") < new.index("[capacity]")
    )
    assert replace_tables(new, tables) == new  # idempotent
