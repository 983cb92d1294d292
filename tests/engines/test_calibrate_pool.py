"""``netcheck engine pool`` (netcheck.engines.calibrate_pool and its CLI)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from netcheck.analysis.slowness import SlownessConfig
from netcheck.capacity import capacity_margin, derive_deadline
from netcheck.cli import main
from netcheck.config import DEFAULT_PROFILES_DIR, CoordinatorConfig, load_profile
from netcheck.engines.calibrate_pool import SLOWNESS_COUPLING, pool_calibrations, slowness_check
from netcheck.engines.calibrate_report import render_markdown, toml_tables
from netcheck.engines.commands import pool as pool_cli

FAST = [1.0 + 0.001 * i for i in range(11)]  # median 1.005, 1% spread
SLOW = [1.06 + 0.001 * i for i in range(9)]  # about 5.5% slower
NET = {"rtt_jitter_s": 0.01, "max_rtt_s": 0.05, "coupling": 0.2}
REAL = Path(__file__).resolve().parents[2] / "docs" / "calibration" / "h200-capacity"


def _record(
    card: str, times: list[float], t_k: list[float] | None = None, **profile: Any
) -> dict[str, Any]:
    """A calibration record as ``engine calibrate`` writes it (the fields pooling reads)."""
    prof = load_profile("h200-torch-bf16").model_dump(mode="json")
    prof.update(profile)
    deadline = derive_deadline(times, **NET).model_dump(mode="json")
    rec: dict[str, Any] = {
        "profile": prof, "cpu": False, "card": card, "times_s": times,
        "t_ref_s": deadline["t_ref_s"], "p99_s": deadline["p99_s"], "deadline": deadline,
        "date": "2026-12-01", "host": "h", "software": "torch-x",
        "t_k_s": [sorted(times)[len(times) // 2]],
    }  # fmt: skip
    if t_k is not None:
        rec["t_k_s"] = t_k
        rec["beta"] = [(t / t_k[0] - 1) / k for k, t in enumerate(t_k[1:], start=1)]
        rec["capacity"] = {"t_s": t_k, "beta": rec["beta"], "margin": 1.5, "packing": "streams",
                           "card": card, "date": "2026-12-01", "peak_tflops": 800.0}  # fmt: skip
    return rec


def test_pooled_deadline_is_the_rule_on_all_times_and_the_slower_card_widens_it() -> None:
    """The deadline is derive_deadline over the concatenated batch times, with the
    records' network figures and coupling; the slower card makes it longer than the fast
    card's own."""
    a, b = _record("H200 GPU-a", FAST, [1.005, 1.9]), _record("H200 GPU-b", SLOW, [1.064, 2.0])
    result = pool_calibrations([a, b], sources=["a.json", "b.json"])
    want = derive_deadline(FAST + SLOW, **NET)
    assert result["deadline"] == want.model_dump(mode="json")
    assert result["times_s"] == FAST + SLOW and result["t_ref_s"] == want.t_ref_s
    alone = derive_deadline(FAST, **NET)
    assert want.a > alone.a and want.p99_s > alone.p99_s  # the spread of the class
    assert result["deadline_s_max_rtt"] > result["pooled_from"][0]["deadline_s_max_rtt_alone"]
    assert [c["file"] for c in result["pooled_from"]] == ["a.json", "b.json"]
    assert [c["n_batches"] for c in result["pooled_from"]] == [11, 9]
    md = render_markdown(result, "netcheck engine pool a.json b.json")
    assert "# Pooled calibration: h200-torch-bf16" in md and "| a.json | H200 GPU-a |" in md
    assert "its own t(1) 1.0050 s" in md and "netcheck engine pool" in toml_tables(result)


def test_margin_is_taken_from_the_card_with_the_smallest_margin() -> None:
    """[capacity] is the fast card's t(k) with its margin at the pooled deadline, whatever
    the record order; a record without co-location figures contributes times only."""
    fast, slow = _record("GPU-a", FAST, [1.005, 1.9, 2.9]), _record("GPU-b", SLOW, [1.064, 2.0])
    times_only = _record("GPU-c", [1.03] * 5)
    for order in ([fast, slow, times_only], [times_only, slow, fast]):
        result = pool_calibrations(order)
        profile = load_profile("h200-torch-bf16").model_copy(
            update={"deadline": derive_deadline([x for r in order for x in r["times_s"]], **NET)}
        )
        assert result["capacity_card"] == "GPU-a" and result["capacity"]["card"] == "GPU-a"
        assert result["margin"] == pytest.approx(capacity_margin(1.9, profile))
        t_ref = result["deadline"]["t_ref_s"]  # the class reference, not the card's 1.005
        assert result["capacity"]["t_s"] == [t_ref, 1.9, 2.9] and t_ref > 1.005
        assert result["capacity"]["beta"] == [round(x, 3) for x in fast["beta"]]
        margins = {c["card"]: c["margin_at_pooled_deadline"] for c in result["pooled_from"]}
        assert margins["GPU-c"] is None and margins["GPU-a"] < margins["GPU-b"]
    assert "capacity" not in pool_calibrations([times_only, _record("GPU-d", [1.02] * 5)])


@pytest.mark.parametrize(
    ("field", "value"),
    [("batch_size", 128), ("dtype", "float32"), ("max_new_tokens", 8), ("model", "synth:8b")],
)
def test_a_different_batch_is_refused_naming_the_field(field: str, value: Any) -> None:
    """Records whose batch fields differ are refused; the profile name may differ."""
    a, b = _record("GPU-a", FAST), _record("GPU-b", SLOW, **{field: value})
    with pytest.raises(ValueError, match=rf"profile\.{field} differs: .* in a\.json, .* in b\."):
        pool_calibrations([a, b], sources=["a.json", "b.json"])
    renamed = _record("GPU-b", SLOW, name="h200-other-name")
    assert pool_calibrations([a, renamed])["profile_names"] == [
        "h200-other-name",
        "h200-torch-bf16",
    ]


def test_cpu_and_gpu_figures_are_not_mixed() -> None:
    """A CPU record with a GPU record is refused, naming the cpu field."""
    cpu = {**_record("cpu (x86_64)", SLOW), "cpu": True}
    with pytest.raises(ValueError, match=r"cpu .*differs: False in a\.json, True in b\.json"):
        pool_calibrations([_record("GPU-a", FAST), cpu], sources=["a.json", "b.json"])


def test_the_same_card_twice_is_refused_unless_allowed() -> None:
    """The same card (UUID) twice is refused; --allow-same-card accepts it and says so."""
    a, b = _record("H200 GPU-a", FAST), _record("H200 GPU-a", SLOW)
    with pytest.raises(ValueError, match=r"card H200 GPU-a appears twice \(x\.json and y\.json"):
        pool_calibrations([a, b], sources=["x.json", "y.json"])
    result = pool_calibrations([a, b], allow_same_card=True)
    assert result["same_card_allowed"] is True
    assert "same card was allowed" in render_markdown(result, "x")
    assert pool_calibrations([a, _record("GPU-b", SLOW)])["same_card_allowed"] is False


def test_a_card_far_from_the_others_is_refused_with_its_gap() -> None:
    """A card 24% slower than the median of the card medians is refused, naming the card
    and the gap; a larger max_card_gap accepts it."""
    records = [_record("GPU-a", [1.0] * 5), _record("GPU-b", [1.01] * 5),
               _record("GPU-c", [1.25] * 5)]  # fmt: skip
    with pytest.raises(ValueError, match=r"card GPU-c \(record 3\).*\+23\.8%.*--max-card-gap"):
        pool_calibrations(records)
    with pytest.raises(ValueError, match=r"GPU-a .*-0\.5% .*1\.0050 s"):
        pool_calibrations(records[:2], max_card_gap=0.004)
    result = pool_calibrations(records, max_card_gap=0.3)
    assert [c["gap"] for c in result["pooled_from"]] == [-0.0099, 0.0, 0.2376]


def test_network_figures_must_agree_or_be_given() -> None:
    """Records derived with different couplings need --coupling; given, it is used."""
    a, b = _record("GPU-a", FAST), _record("GPU-b", SLOW)
    b["deadline"] = {**b["deadline"], "coupling": 0.0}
    with pytest.raises(ValueError, match=r"deadline\.coupling differs: 0\.2 .* 0\.0 .*--coupling"):
        pool_calibrations([a, b])
    assert pool_calibrations([a, b], coupling=0.1)["deadline"]["coupling"] == 0.1
    del b["times_s"]
    with pytest.raises(ValueError, match="record 2: field times_s missing"):
        pool_calibrations([a, b], coupling=0.1)
    with pytest.raises(ValueError, match="record 1: field profile must be a JSON object"):
        pool_calibrations([{**a, "profile": "h200"}, a])
    with pytest.raises(ValueError, match="at least two") as one:
        pool_calibrations([a])
    assert "with one card, `netcheck engine calibrate --update-profile`" in str(one.value)


def _write(tmp_path: Path, name: str, record: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return str(path)


def test_pool_command_writes_the_files_and_updates_a_profile_copy(tmp_path: Path) -> None:
    """``engine pool A B --update-profile COPY`` writes <profile>.json/.md/.tables.toml
    and replaces the copy's [deadline] and [capacity] with the pooled ones."""
    a = _write(tmp_path, "a.json", _record("GPU-a", FAST, [1.005, 1.9]))
    b = _write(tmp_path, "b.json", _record("GPU-b", SLOW, [1.064, 2.0]))
    copy = tmp_path / "mine.toml"
    copy.write_text((DEFAULT_PROFILES_DIR / "h200-torch-bf16.toml").read_text())
    out = tmp_path / "out"
    args = ["engine", "pool", a, b, "--out", str(out), "--update-profile", str(copy)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    written = json.loads((out / "h200-torch-bf16.json").read_text())
    assert (out / "h200-torch-bf16.md").exists() and (out / "h200-torch-bf16.tables.toml").exists()
    prof = load_profile(copy)
    assert prof.deadline.model_dump(mode="json") == derive_deadline(FAST + SLOW, **NET).model_dump(
        mode="json"
    )
    assert prof.capacity is not None and prof.capacity.card == "GPU-a"
    assert prof.reference_t_s == prof.deadline.t_ref_s  # the slowness tests' reference
    assert written["capacity_card"] == "GPU-a" and "capacity margin" in result.output
    assert f"updated {copy}" in " ".join(result.output.split())
    bad = _write(tmp_path, "bad.json", _record("GPU-c", SLOW, batch_size=128))
    result = CliRunner().invoke(main, ["engine", "pool", a, bad, "--out", str(out)])
    assert result.exit_code == 2 and "error:" in result.output
    assert "profile.batch_size differs" in result.output and "bad.json" in result.output
    tiny = ["engine", "pool", a, b, "--out", str(out), "--update-profile", "cpu-tiny"]
    result = CliRunner().invoke(main, tiny)
    assert result.exit_code == 2 and "--update-profile" in result.output
    assert "cpu-tiny.toml: profile.model is" in " ".join(result.output.split())


def test_pool_command_help_and_unreadable_files(tmp_path: Path) -> None:
    """--help says when to use it; a file that is not JSON is an error naming it."""
    text = " ".join(CliRunner().invoke(main, ["engine", "pool", "--help"]).output.split())
    assert "Calibrate each card of the class with `netcheck engine calibrate`" in text
    junk = tmp_path / "junk.json"
    junk.write_text("not json")
    a = _write(tmp_path, "a.json", _record("GPU-a", FAST))
    result = CliRunner().invoke(main, ["engine", "pool", a, str(junk)])
    assert result.exit_code == 2 and "junk.json" in result.output


def test_the_two_real_h200_records_pool() -> None:
    """The repository's two H200 bf16 B = 256 calibrations (two cards, two profile names)
    pool: the faster card (GPU-584c9901) gives [capacity]; recorded in docs/capacity.md."""
    names = ["h200-torch-bf16-b256-call5.json", "h200-torch-bf16-b256.json"]
    records = [json.loads((REAL / n).read_text()) for n in names]
    result = pool_calibrations(records, sources=names, coupling=0.2)
    assert result["t_ref_s"] == 2.2135 and result["p99_s"] == 2.2465
    assert result["capacity_card"].startswith("NVIDIA H200 GPU-584c9901")
    assert result["margin"] == pytest.approx(4.2084 / result["deadline_s_max_rtt"], abs=1e-4)


def test_slowness_check_warns_when_the_floor_does_not_cover_the_slowest_card() -> None:
    """The slowest card's median over t_ref, times 1 + max(coupling, 0.2), against the
    floor: at 1.25 the floor covers cards up to 1.25 / 1.2 = 1.0417 t_ref."""
    ok = slowness_check([0.98, 1.0416], 1.0, 1.25, 0.2)
    assert (ok["slowest_ratio"], ok["coupled_ratio"], ok["warn"]) == (1.0416, 1.2499, False)
    assert ok["max_card_ratio"] == 1.0417 and ok["min_floor"] == 1.25
    bad = slowness_check([1.0425, 0.98], 1.0, 1.25, 0.2)
    assert (bad["coupled_ratio"], bad["min_floor"], bad["warn"]) == (1.251, 1.26, True)
    assert not slowness_check([1.0425], 1.0, 1.26, 0.2)["warn"]
    assert slowness_check([1.0], 1.0, 1.25, 0.0)["coupling"] == SLOWNESS_COUPLING == 0.2
    wide = slowness_check([1.0], 1.0, 1.25, 0.3)  # a larger deadline coupling is taken
    assert (wide["coupling"], wide["coupled_ratio"], wide["warn"]) == (0.3, 1.3, True)
    with pytest.raises(ValueError, match="slowness_floor must be a finite number > 1, got 1.0"):
        slowness_check([1.0], 1.0, 1.0, 0.2)
    for odd in (math.inf, math.nan):  # the coordinator config refuses both too
        with pytest.raises(ValueError, match="slowness_floor must be a finite number > 1"):
            slowness_check([1.0], 1.0, odd, 0.2)


def test_the_pool_report_compares_the_slowest_card_with_the_slowness_floor(
    tmp_path: Path,
) -> None:
    """GPU-b (median 1.064 s) is 1.0535 x the pooled t_ref 1.010 s, 1.264 x with the 20%
    allowance: above the default floor 1.25, so the report warns and names
    slowness_floor (at least 1.27); at --slowness-floor 1.3 one plain line. The CLI's
    default is the coordinator's."""
    a, b = _record("GPU-a", FAST, [1.005, 1.9]), _record("GPU-b", SLOW, [1.064, 2.0])
    result = pool_calibrations([a, b], sources=["a.json", "b.json"])
    s = result["slowness"]
    assert (s["slowest_card"], s["slowest_file"], s["floor"]) == ("GPU-b", "b.json", 1.25)
    assert (s["slowest_ratio"], s["coupled_ratio"], s["warn"]) == (1.0535, 1.2642, True)
    md = " ".join(render_markdown(result, "netcheck engine pool a.json b.json").split())
    assert (
        "**Warning (slowness floor): the slowest card (GPU-b) has its median at 1.054 x "
        "the pooled t_ref, 1.264 x with the 20% co-hosting allowance, against the "
        "coordinator's slowness_floor 1.25 (which covers cards up to 1.042 x t_ref)"
    ) in md
    assert "Raise slowness_floor in the coordinator config to at least 1.27" in md
    with pytest.raises(ValueError, match="slowness_floor must be a finite number > 1"):
        pool_calibrations([a, b], slowness_floor=0.9)
    paths = [_write(tmp_path, "a.json", a), _write(tmp_path, "b.json", b)]
    args = ["engine", "pool", *paths, "--out", str(tmp_path / "out"), "--slowness-floor", "1.3"]
    out = CliRunner().invoke(main, args)
    text = " ".join(out.output.split())
    assert out.exit_code == 0 and "Warning" not in text
    assert "slowness_floor 1.3 (which covers cards up to 1.083 x t_ref)." in text
    written = json.loads((tmp_path / "out" / "h200-torch-bf16.json").read_text())
    assert written["slowness"]["floor"] == 1.3 and not written["slowness"]["warn"]
    params = {p.name: p for p in pool_cli.params}
    assert params["slowness_floor"].default == SlownessConfig.floor
    assert CoordinatorConfig.model_fields["slowness_floor"].default == SlownessConfig.floor
    bad = CliRunner().invoke(main, [*args[:-1], "1.0"])
    assert bad.exit_code == 2 and "--slowness-floor" in bad.output
    out_inf = tmp_path / "out-inf"  # before: accepted, JSON "floor": Infinity written
    inf = CliRunner().invoke(main, [*args[:4], "--out", str(out_inf), "--slowness-floor", "inf"])
    assert inf.exit_code == 2 and "finite number > 1" in inf.output and not out_inf.exists()
    near = CliRunner().invoke(main, [*args[:-1], "1.0000001"])  # printed as given, not "1"
    assert near.exit_code == 0 and "slowness_floor 1.0000001 (which" in near.output
