"""netcheck.coordinator.commands: the ``screen`` and ``flags`` command groups."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def test_cli_groups_have_commands() -> None:
    """``screen run``, ``flags list`` and ``flags show`` exist with their options."""
    from click.testing import CliRunner

    from netcheck.coordinator.commands import flags, screen

    assert set(screen.commands) == {"run"}
    assert set(flags.commands) == {
        "list", "show", "ack", "resolve", "false-positive", "reopen",
    }  # fmt: skip
    out = CliRunner().invoke(screen, ["run", "--help"]).output
    assert "--rounds" in out and "--profile" in out and "--json" in out
    assert "--json" in CliRunner().invoke(flags, ["show", "--help"]).output


def test_screen_run_asks_for_the_capacity_check_and_sends_the_override() -> None:
    """``screen run`` always sets check_capacity; --override-capacity sends the reason."""
    import pytest
    from click.testing import CliRunner

    from netcheck.coordinator import commands

    sent: list[dict[str, object]] = []

    def fake_job(config: object, body: dict[str, object], held: dict[str, object]) -> object:
        sent.append(body)  # screen run follows a coordinator job (run_job)
        return {"state": "done", "report": {"profile": "p", "rounds": [], "flags": []}}

    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "run_job", fake_job)
    try:
        runner = CliRunner()
        assert runner.invoke(commands.screen, ["run", "--json"]).exit_code == 0
        args = ["run", "--json", "--override-capacity", "lab run on CPU"]
        assert runner.invoke(commands.screen, args).exit_code == 0
    finally:
        mp.undo()
    assert sent[0]["check_capacity"] is True and "capacity_override" not in sent[0]
    assert sent[1]["capacity_override"] == "lab run on CPU"


def test_analysis_line_is_plain_about_its_level() -> None:
    """One node: no pairs (not "p < 0.5"); several: the per-pair level and where it comes from."""
    from netcheck.coordinator.commands import analysis_line

    one = {"n_nodes": 1, "n_rounds": 3, "edges": [], "groups": [], "p_crit": 0.5}
    line = analysis_line(one)
    assert "p < 0.5" not in line and "Bonferroni" not in line
    assert "1 node x 3 rounds: no node pairs to compare" in line
    seven = {"n_nodes": 7, "n_rounds": 12, "edges": [{}], "groups": [], "p_crit": 0.5 / 42}
    line = analysis_line(seven)
    assert "1 edges, 0 suspect groups" in line
    assert "p < 0.0119, i.e. 0.5 spread over 42 pairs" in line
    assert "flagged only after confirmation rounds" in line
    # the mutual test's one round per arm, one testable direction enough
    # (DetectorConfig.mutual_min_rounds, mutual_one_way): 0.968 at 12 rounds
    assert "Too few screening rounds" not in line
    ten = analysis_line({**seven, "n_rounds": 10})
    assert "linked only with probability 0.94 after 10; 11 screening rounds give 0.95" in ten
    at_two_thirds = analysis_line({**seven, "n_rounds": 5, "load_probability": 2 / 3})
    assert "linked only with probability 0.89 after 5" in at_two_thirds
    assert "; 7 screening rounds give 0.95" in at_two_thirds


def test_flags_show_prints_commands_that_run_as_shown(tmp_path: Path) -> None:
    """The follow-up commands that ``flags show`` prints carry its --config (another
    coordinator's config would otherwise be read), and the per-member table names
    members as the flags table does."""
    import pytest
    from click.testing import CliRunner

    from netcheck.coordinator import commands

    key = "ed25519:" + "A" * 43
    flag = {
        "flag_id": 5, "kind": "shared-backend", "status": "confirmed", "profile": "p",
        "node_keys": [key], "node_names": ["proxy-a"], "statistic": 1e-9, "threshold": 1e-5,
        "created_at": 0.0, "evidence_rounds": [], "evidence": {"confirmation": {"rounds": [],
        "members": [{"node_key": key, "n_coloaded": 8, "n_alone": 8, "slowdown": 2.0,
                     "t": 9.0, "p": 1e-9, "confirmed": True}]}},
    }  # fmt: skip
    cfg = tmp_path / "my dir" / "coordinator.toml"
    cfg.parent.mkdir()
    cfg.write_text("")
    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "admin_call", lambda *a, **k: flag)
    try:
        result = CliRunner().invoke(
            commands.flags, ["show", "5", "--config", str(cfg)], terminal_width=400
        )
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert f"netcheck flags show --config '{cfg}' --json 5" in out
    assert f"netcheck round show --config '{cfg}' ID" in out
    assert f"proxy-a ({key})" in out.split("confirmation per member")[1]


def _flags_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: dict[str, Any], host: str, port: int
) -> str:
    """``netcheck flags show <flag_id>`` against a coordinator config at ``host:port``
    whose admin API answers ``flag``; returns the output (exit 0 asserted)."""
    from click.testing import CliRunner

    from netcheck.coordinator import commands

    cfg = tmp_path / "coordinator.toml"
    cfg.write_text(
        f'host = "{host}"\nport = {port}\nidentity_key = "k.pem"\nopen_enrollment = true\n'
        'admin_token = "a-test-token-of-some-length"\nprofiles = ["cpu-tiny"]\n'
    )
    monkeypatch.setattr(commands, "admin_call", lambda *a, **k: flag)
    result = CliRunner().invoke(
        commands.flags, ["show", str(flag["flag_id"]), "--config", str(cfg)], terminal_width=400
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_flags_show_puts_the_deciding_table_first_and_caps_the_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A confirmed shared-backend flag with 60 evidence rounds: the per-member table
    comes before the rounds, 10 rounds are listed and the rest summed up with where to
    find them; dashboard links are full URLs at the config's admin address."""
    key = "ed25519:" + "B" * 43
    rounds = [f"r20261202T0700{i:02d}-abcdef" for i in range(60)]
    flag = {
        "flag_id": 5, "kind": "shared-backend", "status": "confirmed", "profile": "p",
        "node_keys": [key], "statistic": 1e-9, "threshold": 1e-5, "created_at": 0.0,
        "evidence_rounds": [{"round_id": r, "dashboard": f"/dashboard/rounds/{r}"}
                            for r in rounds],
        "links": {"dashboard": "/dashboard/flags/5"},
        "evidence": {"confirmation": {"rounds": rounds, "members": [
            {"node_key": key, "n_coloaded": 8, "n_alone": 8, "slowdown": 2.0, "t": 9.0,
             "p": 1e-9, "confirmed": True}]}},
    }  # fmt: skip
    out = _flags_show(tmp_path, monkeypatch, flag, host="0.0.0.0", port=8471)
    assert out.index("confirmation per member") < out.index("evidence rounds: 60")
    base = "http://127.0.0.1:8471"
    assert f"  {rounds[9]}  {base}/dashboard/rounds/{rounds[9]}" in out
    assert rounds[10] not in out
    assert f"... 50 more (--json, or the dashboard page {base}/dashboard/flags/5)" in out
    assert f"dashboard: {base}/dashboard/flags/5" in out
    assert len(out.splitlines()) < 40, out


def test_flags_show_says_where_the_receipts_are_and_drops_an_empty_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An analyst reading ``flags show`` is told how to download the flag's receipts
    (the receipts.json URL, token as a header) and the ``receipt verify`` command for
    one of them; a review without a note ends at its time (was ``...:`` and nothing).
    Checked to fail before the change."""

    key = "ed25519:" + "C" * 43
    receipt = {
        "round_id": "r20261202T233519-57ee65",
        "node_key": key,
        "session_id": "ab" * 16,
        "commitment": "cd" * 32,
        "signature": "ef" * 64,
    }
    flag = {
        "flag_id": 1, "kind": "capacity", "status": "confirmed", "profile": "p",
        "node_keys": [key], "statistic": 0.001, "threshold": 0.01, "created_at": 0.0,
        "evidence_rounds": [], "evidence": {"receipts": [receipt]},
        "reviews": [{"state": "open", "by": "ana", "at": 0.0, "note": ""},
                    {"state": "acknowledged", "by": "ana", "at": 0.0, "note": "looking"}],
        "links": {"dashboard": "/dashboard/flags/1",
                  "receipts": "/dashboard/flags/1/receipts.json"},
    }  # fmt: skip
    output = _flags_show(tmp_path, monkeypatch, flag, host="127.0.0.1", port=8472)
    cfg = tmp_path / "coordinator.toml"
    lines = output.splitlines()
    assert "review: open by ana at 1970-01-01T00:00:00+00:00" in lines
    assert "review: acknowledged by ana at 1970-01-01T00:00:00+00:00: looking" in lines
    out = " ".join(output.split())
    assert (
        "download them: curl -H 'Authorization: Bearer <admin_token>' "
        "http://127.0.0.1:8472/dashboard/flags/1/receipts.json" in out
    )
    assert (
        f"check one offline: netcheck receipt verify --config {cfg} "
        f"--node-key {key} --round-id r20261202T233519-57ee65" in out
    )


def test_flags_list_filters_by_review_state() -> None:
    """``flags list --review open`` asks the API for the flags nobody has reviewed yet
    (``GET /admin/flags?review=open``), alongside the other filters."""
    import pytest
    from click.testing import CliRunner

    from netcheck.coordinator import commands

    asked: list[str] = []

    def fake_call(config: object, method: str, path: str, *a: object, **k: object) -> object:
        asked.append(path)
        return {"flags": []}

    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "admin_call", fake_call)
    try:
        args = ["list", "--review", "open", "--kind", "slow", "--json"]
        result = CliRunner().invoke(commands.flags, args)
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    assert asked == ["/admin/flags?kind=slow&review=open"]


def test_eta_text_says_confirmation_has_no_eta() -> None:
    """Before the last screening round ends: its ETA; after: that the analysis and
    confirmation rounds run, how long so far, and that they have no ETA (the line said
    'ETA analysing' for the minutes confirmation takes)."""
    from netcheck.coordinator.screen_follow import eta_text

    job = {"rounds_done": 3, "rounds_total": 16, "state": "running", "eta_s": 41.2}
    assert eta_text(job) == "ETA 41 s"
    assert eta_text({**job, "eta_s": None}) == "ETA -"
    done = {**job, "rounds_done": 16, "eta_s": None}
    assert eta_text(done) == "analysis and confirmation rounds running (no ETA)"
    assert eta_text(done, 95.4) == "analysis and confirmation rounds running (no ETA; 95 s so far)"


def fake_job_status(
    monkeypatch: pytest.MonkeyPatch, base: dict[str, object], states: Iterator[dict[str, object]]
) -> None:
    """``screen run``'s admin calls answered without a coordinator: the job's start, no
    known nodes, then ``states`` one per poll (no wait between polls)."""
    from netcheck.coordinator import screen_follow

    async def fake_request(cfg: object, method: str, path: str, *a: object, **k: object) -> object:
        if method == "POST":
            return {**base, "state": "running", "rounds_done": 0}
        return {"known": []} if path == "/admin/nodes" else next(states)

    monkeypatch.setattr(screen_follow, "admin_request", fake_request)
    monkeypatch.setattr(screen_follow, "POLL_S", 0.0)


async def test_screen_run_keeps_saying_it_is_confirming(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a terminal, the progress line is repeated while the confirmation rounds
    run, so a long confirmation does not look like a hang."""
    from netcheck.coordinator import screen_follow

    base = {"job_id": "s1", "profile": "p", "rounds_total": 2, "eta_s": None}
    states = iter([
        {**base, "state": "running", "rounds_done": 1, "eta_s": 5.0},
        {**base, "state": "running", "rounds_done": 2},
        {**base, "state": "running", "rounds_done": 2},
        {**base, "state": "running", "rounds_done": 2},
        {**base, "state": "done", "rounds_done": 2, "report": {}},
    ])  # fmt: skip

    fake_job_status(monkeypatch, base, states)
    monkeypatch.setattr(screen_follow, "AFTER_LINE_S", 0.0)
    job = await screen_follow._follow(object(), {}, {})  # type: ignore[arg-type]
    assert job["state"] == "done"
    err = capsys.readouterr().err
    assert "screening: 1 of 2 rounds, ETA 5 s" in err
    assert err.count("analysis and confirmation rounds running (no ETA") >= 2, err


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "coordinator.toml"
    cfg.write_text(
        'port = 8471\nidentity_key = "k.pem"\nopen_enrollment = true\n'
        'admin_token = "a-test-token-of-some-length"\nprofiles = ["cpu-tiny"]\n'
    )
    return cfg


def test_flags_list_without_flags_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No flag: one line naming the coordinator asked, the filters and what raises flags,
    not an empty table; exit 0."""
    from click.testing import CliRunner

    from netcheck.coordinator import commands

    monkeypatch.setattr(commands, "admin_call", lambda *a, **k: {"flags": []})
    cfg = _config(tmp_path)
    result = CliRunner().invoke(commands.flags, ["list", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1 and "┃" not in result.output, result.output
    assert f"no flags on the coordinator at http://127.0.0.1:8471 ({cfg})" in result.output
    assert f"`netcheck screen run --config {cfg}`" in result.output
    args = ["list", "--config", str(cfg), "--kind", "slow", "--review", "open"]
    result = CliRunner().invoke(commands.flags, args)
    assert "no flags matching kind=slow, review=open on the coordinator" in result.output


def test_round_list_without_rounds_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No stored round: one line with the command that runs one; an offset past the
    end says how many are stored."""
    from click.testing import CliRunner

    from netcheck.coordinator import round_commands

    answer = {"rounds": [], "total": 0}
    monkeypatch.setattr(round_commands, "admin_call", lambda *a, **k: answer)
    cfg = _config(tmp_path)
    result = CliRunner().invoke(round_commands.round_list, ["--config", str(cfg)])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1 and "┃" not in result.output, result.output
    assert f"no rounds stored on the coordinator at http://127.0.0.1:8471 ({cfg})" in result.output
    assert f"`netcheck round run --config {cfg}`" in result.output
    answer["total"] = 3
    args = ["--config", str(cfg), "--offset", "5"]
    result = CliRunner().invoke(round_commands.round_list, args)
    assert result.exit_code == 0, result.output
    assert "no rounds after the newest 5: the coordinator at" in result.output
    assert "stores 3" in result.output


def test_confirm_text_counts_rounds_and_groups() -> None:
    """Once the screening rounds are done the line says what the confirmation is doing:
    the stage, confirmation rounds so far in this job, suspect groups under test and
    settled (the line only said 'running' for the minutes confirmation takes)."""
    from netcheck.coordinator.screen_follow import eta_text

    c = {"stage": "analysis", "rounds_done": 0, "groups_total": 0, "groups_active": 0,
         "groups_done": 0}  # fmt: skip
    job = {"rounds_done": 16, "rounds_total": 16, "state": "running", "eta_s": None,
           "confirmation": c}  # fmt: skip
    assert eta_text(job, 3.2) == "analysis running (no ETA; 3 s so far)"
    c.update(stage="groups", rounds_done=14, groups_total=3, groups_active=2, groups_done=1)
    assert eta_text(job, 95.4) == (
        "14 confirmation rounds so far; suspect groups: 2 under test, 1 of 3 settled "
        "(no ETA; 95 s so far)"
    )
    c.update(stage="alone", rounds_done=30, groups_active=0, groups_done=3)
    assert eta_text(job) == (
        "30 confirmation rounds so far; 3 of 3 suspect groups settled; slow nodes confirmed "
        "alone (no ETA)"
    )
    c.update(rounds_done=1, groups_total=0, groups_done=0)
    assert eta_text(job) == "1 confirmation round so far; slow nodes confirmed alone (no ETA)"


async def test_screen_run_prints_confirmation_progress(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a terminal, a progress line whenever the confirmation's groups change,
    with the rounds run so far (the job's ``confirmation``)."""
    from netcheck.coordinator import screen_follow

    base = {"job_id": "s1", "profile": "p", "rounds_total": 2, "rounds_done": 2, "eta_s": None}

    def conf(stage: str | None, rounds: int, active: int, done: int) -> dict[str, object]:
        c = {"stage": stage, "rounds_done": rounds, "groups_total": 2, "groups_active": active,
             "groups_done": done}  # fmt: skip
        return {**base, "state": "running", "confirmation": c}

    states = iter([conf("analysis", 0, 0, 0), conf("groups", 3, 2, 0), conf("groups", 9, 1, 1),
                   {**conf("groups", 12, 0, 2), "state": "done", "report": {}}])  # fmt: skip

    fake_job_status(monkeypatch, base, states)
    job = await screen_follow._follow(object(), {}, {})  # type: ignore[arg-type]
    assert job["state"] == "done"
    err = capsys.readouterr().err
    assert "screening: 2 of 2 rounds, analysis running (no ETA" in err
    assert "3 confirmation rounds so far; suspect groups: 2 under test, 0 of 2 settled" in err
    assert "9 confirmation rounds so far; suspect groups: 1 under test, 1 of 2 settled" in err


def test_screen_run_without_flags_says_so(tmp_path: Path) -> None:
    """A run that raised no flag prints one line naming `flags list`, not an empty table;
    a run that raised one prints the table; a ``cleared`` record is explained."""
    from click.testing import CliRunner

    from netcheck.coordinator import commands

    flag = {
        "flag_id": 3, "kind": "slow", "status": "pending", "node_keys": ["ed25519:k"],
        "statistic": 1.0, "threshold": 0.5, "created_at": 0.0,
    }  # fmt: skip
    cleared = {**flag, "flag_id": 4, "kind": "shared-backend", "status": "cleared"}
    reports = [
        {"profile": "p", "rounds": [], "flags": []},
        {"profile": "p", "rounds": [], "flags": [flag]},
        {"profile": "p", "rounds": [], "flags": [cleared]},
    ]

    def fake_job(config: object, body: dict[str, object], held: dict[str, object]) -> object:
        return {"state": "done", "report": reports.pop(0)}

    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "run_job", fake_job)
    mp.setattr(commands, "check_round_outcome", lambda *a, **k: None)
    try:
        runner = CliRunner()
        cfg = tmp_path / "c.toml"
        cfg.write_text("")
        none = runner.invoke(commands.screen, ["run", "--config", str(cfg)])
        one = runner.invoke(commands.screen, ["run", "--config", str(cfg)])
        gone = runner.invoke(commands.screen, ["run", "--config", str(cfg)])
    finally:
        mp.undo()
    assert none.exit_code == 0, none.output
    assert "no flags raised by this run" in none.output
    assert f"netcheck flags list --config {cfg}" in " ".join(none.output.split())
    assert "flags raised" in one.output and "ed25519:k" in one.output
    assert "no flags raised" not in one.output
    # a cleared record (a suspect group the confirmation did not confirm) is explained
    assert "status cleared" not in one.output
    text = " ".join(gone.output.split())
    assert "status cleared: the confirmation rounds did not confirm the suspicion" in text


def test_flags_list_help_tells_status_from_review() -> None:
    """``--status`` is the detector's state; its help points a reader who means the
    analyst's review (``--status open`` is a 400: 'unknown status') to ``--review open``."""
    from click.testing import CliRunner

    from netcheck.coordinator.commands import flags

    out = " ".join(CliRunner().invoke(flags, ["list", "--help"]).output.split())
    assert "The detector's state: confirmed, pending or cleared" in out
    assert "not the analyst's review: for the flags nobody has looked at yet, --review open" in out


def test_reopen_help_names_every_state_it_leaves() -> None:
    """``flags reopen`` moves acknowledged, resolved and false-positive flags back to
    open (netcheck.storage.reviews.TRANSITIONS); its help named only the last two."""
    from click.testing import CliRunner

    from netcheck.coordinator.commands import flags
    from netcheck.storage.reviews import TRANSITIONS

    leaves = sorted(s for s, to in TRANSITIONS.items() if "open" in to)
    assert leaves == ["acknowledged", "false-positive", "resolved"]
    out = " ".join(CliRunner().invoke(flags, ["reopen", "--help"]).output.split())
    assert "Reopen a flag (acknowledged, resolved or false-positive): back to open." in out


def test_screen_run_that_did_not_end_judged_exits_stopped(tmp_path: Path) -> None:
    """A job cancelled by another client (during its rounds, or during its confirmation:
    ``halted``), stopped by the coordinator's shutdown (no report), reported ``done`` but
    ``cancelled``, or in a state the client does not know, exits 11 (``STOPPED``) with a
    sentence saying so, in text and with --json (before: 0, or a traceback without a
    report); a completed run exits 0."""
    from click.testing import CliRunner

    from netcheck.cli import main
    from netcheck.coordinator import commands
    from netcheck.exitcodes import Exit

    base = {"job_id": "s1", "profile": "p", "rounds_done": 3, "rounds_total": 8, "error": None}
    report = {"profile": "p", "rounds": [], "flags": [], "confirmations": [], "analysis": None,
              "flag_ids": [], "cancelled": True}  # fmt: skip
    halted = {
        **report,
        "analysis": {"n_nodes": 1, "n_rounds": 8},
        "halted": "screening job cancelled",
    }
    ended = [
        ({**base, "state": "cancelled", "report": report}, "cancelled on the coordinator by another client"),
        ({**base, "state": "cancelled", "report": halted}, "stopped, not judged"),
        ({**base, "state": "cancelled", "report": None, "error": "cancelled at coordinator shutdown"},
         "stopped by the coordinator's shutdown"),
        ({**base, "state": "done", "report": report}, "by another client"),
        ({**base, "state": "lost", "report": {**report, "cancelled": False}}, "ended in state 'lost'"),
    ]  # fmt: skip
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    runner = CliRunner()
    mp = pytest.MonkeyPatch()
    try:
        for job, says in ended:
            mp.setattr(commands, "run_job", lambda *a, job=job: job)
            for extra in ([], ["--json"]):
                res = runner.invoke(main, ["screen", "run", "--config", str(cfg), *extra])
                assert res.exit_code == Exit.STOPPED, (job, res.output)
                text = " ".join(res.output.split())
                assert "screening job s1 of profile p" in text and says in text, text
        done = {**base, "state": "done", "report": {**report, "cancelled": False}}
        mp.setattr(commands, "run_job", lambda *a: done)
        assert runner.invoke(main, ["screen", "run", "--config", str(cfg)]).exit_code == 0
    finally:
        mp.undo()


def test_ended_unjudged_names_the_coordinators_own_words() -> None:
    """The client's copies of the shutdown words are the coordinator's (``halted`` and
    the job's ``error``), so a shutdown is never called another client's cancel."""
    from netcheck.coordinator import confirm_batches, screen_follow

    assert screen_follow.SHUTDOWN_HALT == confirm_batches.SHUTDOWN


def test_ctrl_c_on_a_job_that_stays_cancelling_says_so_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C on ``screen run`` whose job is still ``cancelling`` when the wait for it runs
    out (its round in flight stuck behind a slow database, say): one clear line naming
    the job and how to follow it, exit 130 (before: a ``TimeoutError`` traceback)."""
    from click.testing import CliRunner

    from netcheck.coordinator import commands, screen_follow
    from netcheck.exitcodes import Exit

    def interrupted(config: object, body: object, held: dict[str, object]) -> object:
        held["job_id"] = "s7"
        raise KeyboardInterrupt

    async def fake_request(cfg: object, method: str, path: str, *a: object, **k: object) -> object:
        return {"job_id": "s7", "state": "cancelling", "rounds_done": 3, "rounds_total": 32}

    monkeypatch.setattr(commands, "run_job", interrupted)
    monkeypatch.setattr(screen_follow, "admin_request", fake_request)
    monkeypatch.setattr(screen_follow, "POLL_S", 0.01)
    monkeypatch.setattr(screen_follow, "CANCEL_WAIT_S", 0.05)
    result = CliRunner().invoke(commands.screen, ["run", "--config", str(_config(tmp_path))])
    assert result.exit_code == Exit.INTERRUPTED, (result.output, result.exception)
    out = " ".join(result.output.split())
    assert "cancel requested after 3 of 32 rounds" in out, out
    assert "screening job s7 is still cancelling on the coordinator after 0 s" in out, out
    assert "GET /admin/screening/jobs/s7" in out and "Traceback" not in out


def test_second_ctrl_c_while_cancelling_exits_130_naming_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C while ``screen run`` waits for the cancelled job to stop: exit 130
    with a line naming the job and the requests that show or cancel it (before: click's
    "Aborted!" and exit 1)."""
    from click.testing import CliRunner

    from netcheck.coordinator import commands
    from netcheck.exitcodes import Exit

    def interrupted(config: object, body: object, held: dict[str, object]) -> object:
        held["job_id"] = "s8"
        raise KeyboardInterrupt

    def interrupted_again(config: object, held: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "run_job", interrupted)
    monkeypatch.setattr(commands, "cancel_job", interrupted_again)
    result = CliRunner().invoke(commands.screen, ["run", "--config", str(_config(tmp_path))])
    assert result.exit_code == Exit.INTERRUPTED, (result.output, result.exception)
    out = " ".join(result.output.split())
    assert "interrupted again: screening job s8 may still be running" in out, out
    assert "DELETE /admin/screening/jobs/s8 cancels it" in out


def _job_polled_once_then(
    monkeypatch: pytest.MonkeyPatch,
    screen_follow: Any,
    job_id: str,
    done: int,
    fail: Callable[[str], Exception],
) -> None:
    """Patch ``screen_follow``'s admin requests: the job ``job_id`` (32 rounds) starts,
    one poll says ``done`` rounds are done, every later poll raises ``fail(path)``."""
    base = {"job_id": job_id, "profile": "p", "rounds_total": 32, "eta_s": None}
    polls = iter([{**base, "state": "running", "rounds_done": done}])

    async def fake_request(cfg: object, method: str, path: str, *a: object, **k: object) -> object:
        if method == "POST":
            return {**base, "state": "running", "rounds_done": 0}
        if path == "/admin/nodes":
            return {"known": []}
        try:
            return next(polls)
        except StopIteration:
            err = fail(path)
            raise err from err.__cause__  # the cause fail() gave, else none

    monkeypatch.setattr(screen_follow, "admin_request", fake_request)
    monkeypatch.setattr(screen_follow, "POLL_S", 0.0)


def test_coordinator_lost_during_screen_run_says_the_job_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator stops answering while ``screen run`` follows its job (killed,
    restarted): exit 4 with a line naming the job, the rounds done, that the job is gone
    and what is kept, then the start hint (before: only "nothing listens there: start
    it", as if no run had been going)."""
    import aiohttp
    from click.testing import CliRunner

    from netcheck.admin_client import AdminUnreachable
    from netcheck.coordinator import screen_follow
    from netcheck.exitcodes import Exit

    def lost(path: str) -> Exception:
        refused = aiohttp.ClientConnectorError(
            aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 8471, False, True, None, None, None),
            ConnectionRefusedError(111, "Connection refused"),
        )
        err = AdminUnreachable("cannot reach the coordinator")
        err.__cause__ = refused
        return err

    _job_polled_once_then(monkeypatch, screen_follow, "s9", 5, lost)
    from netcheck.cli import main

    cfg = _config(tmp_path)
    result = CliRunner().invoke(main, ["screen", "run", "--config", str(cfg)])
    assert result.exit_code == Exit.UNREACHABLE, (result.output, result.exception)
    out = " ".join(result.output.split())
    assert "lost the coordinator during screening job s9 after 5 of 32 rounds" in out, out
    assert "the job is gone" in out and "rounds stored so far are kept" in out
    assert "nothing listens there: start it with" in out


def test_job_gone_after_a_quick_coordinator_restart_exits_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator restarted between two polls (jobs live in its memory): its 404
    for the job is exit 11 with the job, its rounds and what is kept (before: "HTTP
    404: no screening job", exit 7, as if the id were mistyped)."""
    from click.testing import CliRunner

    from netcheck.admin_client import AdminNotFound
    from netcheck.cli import main
    from netcheck.coordinator import screen_follow
    from netcheck.exitcodes import Exit

    def gone(path: str) -> Exception:
        return AdminNotFound(f"GET {path}: HTTP 404: no screening job 's10'")

    _job_polled_once_then(monkeypatch, screen_follow, "s10", 7, gone)
    result = CliRunner().invoke(main, ["screen", "run", "--config", str(_config(tmp_path))])
    assert result.exit_code == Exit.STOPPED, (result.output, result.exception)
    out = " ".join(result.output.split())
    assert "lost the coordinator during screening job s10 after 7 of 32 rounds" in out, out
    assert "HTTP 404" in out
