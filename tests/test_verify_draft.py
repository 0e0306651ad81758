"""The draft's verdicts as pure functions (verify/draft.py): what SGLang's sglext and /metrics carry, read; the
thresholds (dead at 1.2 or less, a WARN below the floor, nothing with speculative decoding off); the figure in the
verify timer's metrics file; the floor passed to the units only where a profile changes it; the simulator's stand-in
figures in SGLang's formulas. The same verdicts on SGLang's serving layer: tests/test_draft_sglang.py."""

from __future__ import annotations

from typing import Any

import pytest

from kimi_serve.profile.loader import load_profile
from kimi_serve.service.unit import floor_args
from kimi_serve.simulator.engine import spec_meta, stand_in_acceptance
from kimi_serve.simulator.perf import PerfModel, PerfParams, SpecSettings
from kimi_serve.verify.draft import (
    DEAD_AT,
    DEFAULT_FLOOR,
    Acceptance,
    ServerSpec,
    SpecSample,
    delta_accept_length,
    findings,
    measure,
    parse_metrics,
    result,
    spec_sample,
)
from kimi_serve.verify.metrics import read_samples, render_metrics
from kimi_serve.verify.report import Readiness, VerifyReport

ON = ServerSpec(known=True, algorithm="EAGLE3", draft_path="/models/kimi-k2.5-eagle3-mla")
OFF = ServerSpec(known=True, algorithm=None)
UNKNOWN = ServerSpec()


def _acc(length: float | None, floor: float | None = DEFAULT_FLOOR) -> Acceptance:
    return Acceptance(length, "probes", 100, 5, None, None, floor, ON.draft_path, "EAGLE3")


def _codes(acc: Acceptance) -> tuple[list[str], list[str]]:
    fails, warns = findings(acc)
    return [f.code for f in fails], [f.code for f in warns]


def test_sglext_spec_tokens_details_are_read_and_nonsense_is_not() -> None:
    details = {"spec_accept_length": 2.75, "spec_verify_ct": 40, "spec_accept_rate": 0.58}
    assert spec_sample({"sglext": {"spec_tokens_details": details}}) == SpecSample(2.75, 40)
    assert spec_sample({"sglext": {"spec_tokens_details": [details, {}]}}) == SpecSample(2.75, 40)  # n > 1
    for body in (
        {},
        {"sglext": None},
        {"sglext": {"spec_tokens_details": None}},
        {"sglext": {"spec_tokens_details": []}},
        {"sglext": {"spec_tokens_details": {**details, "spec_verify_ct": 0}}},  # no verify step: no figure
        {"sglext": {"spec_tokens_details": {**details, "spec_accept_length": "2.7"}}},
        {"sglext": {"spec_tokens_details": {**details, "spec_accept_length": float("nan")}}},
        {"sglext": {"spec_tokens_details": {**details, "spec_verify_ct": True}}},
        [details],
    ):
        assert spec_sample(body) is None, body


@pytest.mark.parametrize(
    "length, fails, warns",
    [
        (1.0, ["draft_dead"], []),
        (DEAD_AT, ["draft_dead"], []),  # 1.2 or less: the draft does nothing
        (1.21, [], ["draft_below_floor"]),
        (1.6, [], ["draft_below_floor"]),  # a weak draft (simulate --draft-accept-length 1.6)
        (2.29, [], ["draft_below_floor"]),
        (DEFAULT_FLOOR, [], []),
        (3.8, [], []),
        (None, [], ["draft_acceptance_unreported"]),
    ],
)
def test_thresholds(length: float | None, fails: list[str], warns: list[str]) -> None:
    assert _codes(_acc(length)) == (fails, warns)


def test_the_floor_is_the_profiles_and_none_leaves_only_the_dead_line() -> None:
    assert _codes(_acc(2.5, floor=3.0)) == ([], ["draft_below_floor"])
    assert _codes(_acc(1.6, floor=None)) == ([], [])
    assert _codes(_acc(1.1, floor=None)) == (["draft_dead"], [])
    warn = findings(_acc(1.6, floor=3.0))[1][0]
    assert "mean accept length 1.60 tokens/step" in warn.message and "floor 3" in warn.message
    assert ON.draft_path in warn.message and "speculative.accept_floor" in warn.fix
    dead = findings(_acc(1.04))[0][0]
    assert "1.04" in dead.message and ON.draft_path in dead.fix and "vocab" in dead.fix


def test_nothing_is_judged_with_speculative_decoding_off() -> None:
    samples = [SpecSample(1.0, 50)]
    assert measure(samples, OFF, floor=DEFAULT_FLOOR, spec_expected=True) is None  # the server's word comes first
    assert measure([], UNKNOWN, floor=DEFAULT_FLOOR) is None  # nothing says it is on
    assert measure([], UNKNOWN, floor=DEFAULT_FLOOR, spec_expected=False) is None
    unreported = measure([], UNKNOWN, floor=DEFAULT_FLOOR, spec_expected=True)  # the profile says it is on
    assert unreported is not None and unreported.accept_length is None
    assert _codes(unreported) == ([], ["draft_acceptance_unreported"])
    # the answers themselves show it on (a server that hides /server_info)
    assert measure(samples, UNKNOWN, floor=DEFAULT_FLOOR) is not None


def test_the_mean_weighs_each_answer_by_its_verify_steps_and_falls_back_to_metrics() -> None:
    acc = measure([SpecSample(3.0, 30), SpecSample(1.0, 10)], ON, floor=DEFAULT_FLOOR)
    assert acc is not None and acc.source == "probes" and acc.accept_length == pytest.approx(2.5)
    assert (acc.verify_steps, acc.answers) == (40, 2)
    few = [SpecSample(1.0, 3)]  # too few steps to judge: /metrics' figure instead
    with_metrics = ServerSpec(**{**ON.__dict__, "metrics_accept_length": 2.8})
    acc = measure(few, with_metrics, floor=DEFAULT_FLOOR)
    assert acc is not None and acc.source == "/metrics" and acc.accept_length == 2.8
    acc = measure(few, ON, floor=DEFAULT_FLOOR)
    assert acc is not None and acc.accept_length is None


def test_metrics_text_and_counter_deltas() -> None:
    text = (
        "# HELP sglang:spec_accept_length x\n# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{model_name="k",tp_rank="0"} 2.5\n'
        'sglang:spec_accept_length{model_name="k",tp_rank="1"} 3.5\n'
        "sglang:spec_accept_rate 0.5\nsglang:spec_accept_length_other 9\nsglang:spec_accept_rate nan\n"
    )
    assert parse_metrics(text) == {"spec_accept_length": 3.0, "spec_accept_rate": 0.5}
    assert delta_accept_length((100.0, 50.0), (400.0, 150.0)) == 3.0
    assert delta_accept_length((100.0, 50.0), (100.0, 50.0)) is None  # no verify step in the window
    assert delta_accept_length(None, (1.0, 1.0)) is None


def _report(acc: Acceptance | None) -> VerifyReport:
    report = VerifyReport(target="http://127.0.0.1:30000", suite="quick", readiness=Readiness(True, "ready", 0.0))
    report.acceptance = acc
    if acc is not None:
        report.probes.append(result(acc))
    return report


def test_the_timer_exports_the_figure_and_the_floor() -> None:
    def samples(acc: Acceptance | None) -> dict[str, float]:
        text = render_metrics(_report(acc), profile="prod", endpoint="http://127.0.0.1:30000", finished=1.0)
        return {n: v for n, _, v in read_samples(text) if n.startswith("kimi_serve_contract_draft_")}

    got = samples(_acc(1.04))
    assert got["kimi_serve_contract_draft_accept_length"] == 1.04
    assert got["kimi_serve_contract_draft_accept_floor"] == DEFAULT_FLOOR
    assert "kimi_serve_contract_draft_accept_floor" not in samples(_acc(2.9, floor=None))
    assert samples(None) == {}  # speculative decoding off: no series
    assert samples(_acc(None)) == {}
    text = render_metrics(_report(_acc(1.04)), profile="prod", endpoint="e", finished=1.0)
    assert 'kimi_serve_contract_probe_pass{profile="prod",endpoint="e",probe="draft",mode="non-stream"} 0' in text


def test_the_units_pass_the_floor_only_where_a_profile_changes_it() -> None:
    assert floor_args(load_profile("prod")) == []  # the default is verify's own: units stay as they were
    assert floor_args(load_profile("baseline")) == []  # no speculative decoding
    assert floor_args(load_profile("prod", ["speculative.accept_floor=3.1"])) == ["--accept-floor", "3.1"]
    assert floor_args(load_profile("prod", ["speculative.accept_floor=null"])) == ["--accept-floor", "1"]


def test_the_simulators_figures_are_sglangs_formulas() -> None:
    spec = SpecSettings("EAGLE3", 3, 1, 4)
    meta: dict[str, Any] = spec_meta(spec, completion_tokens=60, verify_ct=20, correct=38)
    assert meta["spec_accept_length"] == 3.0  # completion tokens / verify steps
    assert meta["spec_num_proposed_drafts"] == 60 and meta["spec_accept_rate"] == pytest.approx(38 / 60)
    dead = PerfModel(PerfParams(accept_length=1.0), spec, None)
    assert {dead.draw_accept() for _ in range(200)} == {1}  # a dead draft: every step yields the bonus token only
    assert "dead" in stand_in_acceptance(1.0) and "weak" in stand_in_acceptance(1.6)
    assert "STAND-IN" in stand_in_acceptance(2.9)
