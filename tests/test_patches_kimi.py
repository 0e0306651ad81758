"""The Kimi patch set (patches/sglang-0.5.23-kimi: SGLang 0.5.23's kimi_k2 parser faults) through the same machinery as
the SM120 set, on scratch copies of the real 0.5.23 files from the cached pinned wheel: it applies cleanly, next to the
SM120 set on one install, all-or-nothing, and reverts byte for byte. What each patch fixes, on SGLang's real detector
and serving layer: tests/test_patches_sglang.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patches_support import extract, pinned_wheel, snapshot

from kimi_serve.core.errors import ExitCode
from kimi_serve.patches import apply, available_patch_sets, check_applies_to_wheel, load_patch_set, revert, status

KIMI, SM120 = "sglang-0.5.23-kimi", "sglang-0.5.23-sm120"
DETECTOR = "sglang/srt/function_call/kimik2_detector.py"
CHAT = "sglang/srt/entrypoints/openai/serving_chat.py"
PROTOCOL = "sglang/srt/entrypoints/openai/protocol.py"


@pytest.fixture(scope="module")
def kimi():
    return load_patch_set(KIMI)


@pytest.fixture
def site(tmp_path: Path, kimi) -> Path:
    """A stand-in site-packages: the real 0.5.23 files both sets touch, version files, dist-info."""
    return extract(
        pinned_wheel(kimi), tmp_path / "site-packages", whole_package=False, extra=(DETECTOR, CHAT, PROTOCOL)
    )


def test_the_kimi_set_is_shipped_separately_and_applies_to_the_pinned_wheel(kimi) -> None:
    assert {KIMI, SM120} <= set(available_patch_sets())
    assert kimi.target_version == "0.5.23"
    assert set(kimi.features) == {
        "keep_unexpected_tool_call_ids",
        "no_null_tool_call_delta_fields",
        "bare_tool_call_begin_non_stream",
        "moonshot_thinking_field",
    }
    assert {f.path for f in kimi.files} == {DETECTOR, CHAT, PROTOCOL}
    assert not {f.path for f in kimi.files} & {f.path for f in load_patch_set(SM120).files}  # disjoint sets
    result = check_applies_to_wheel(kimi, pinned_wheel(kimi))
    assert result.ok, result.message


def test_both_sets_on_one_install_and_the_kimi_set_reverts_byte_for_byte(site: Path, tmp_path: Path, kimi) -> None:
    state = tmp_path / "state"
    pristine = snapshot(site)
    assert apply(site, kimi, state_dir=state).status.all_applied
    assert apply(site, load_patch_set(SM120), state_dir=state).status.all_applied
    assert status(site, kimi, state_dir=state).features == dict.fromkeys(kimi.features, True)
    assert "_name_from_unexpected_id" in (site / DETECTOR).read_text()
    revert(site, kimi, state_dir=state)
    revert(site, load_patch_set(SM120), state_dir=state)
    assert snapshot(site) == pristine
    assert not list(state.glob("patches/*/*/record.json"))


def test_a_conflict_in_a_later_patch_file_changes_nothing(site: Path, tmp_path: Path, cli) -> None:
    with open(site / CHAT, "a") as fh:  # touched by 0002 only
        fh.write("# local edit\n")
    before = snapshot(site)
    res = cli(
        "patches", "apply", "--site-packages", str(site), "--patch-set", KIMI, "--state-dir", str(tmp_path / "st")
    )
    assert res.code == ExitCode.FAILED and CHAT in res.err and "nothing was changed" in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert snapshot(site) == before


def test_cli_status_apply_revert_for_the_kimi_set(site: Path, tmp_path: Path, cli) -> None:
    args = ("--site-packages", str(site), "--patch-set", KIMI, "--state-dir", str(tmp_path / "st"))
    assert cli("patches", "status", *args).code == 1
    data = json.loads(cli("patches", "apply", *args, "--json").out)
    assert data["applied"] and [p["state"] for p in data["patches"]] == ["applied"] * 4
    res = cli("patches", "revert", *args)
    assert res.code == 0 and "restored 3 original files" in res.out and res.out.count("not applied") == 4


def test_two_sets_applied_together_are_all_or_nothing_across_them(site: Path, tmp_path: Path, kimi) -> None:
    """A profile's patch_set list (prod: the SM120 set, then the Kimi set): a conflict in the second set reverts
    the first too (apply_sets), so the install is byte for byte as before; without the conflict both apply."""
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.patches import apply_sets

    sets, state = [load_patch_set(SM120), kimi], tmp_path / "state"
    with open(site / CHAT, "a") as fh:  # the Kimi set's file only: the SM120 set applies, then the Kimi set fails
        fh.write("# local edit\n")
    before = snapshot(site)
    with pytest.raises(KimiServeError, match="nothing was changed"):
        apply_sets(site, sets, state_dir=state)
    assert snapshot(site) == before
    assert not status(site, load_patch_set(SM120), state_dir=state).all_applied
    (site / CHAT).write_text((site / CHAT).read_text().removesuffix("# local edit\n"))
    results = apply_sets(site, sets, state_dir=state)
    assert [r.status.all_applied for r in results] == [True, True]


def test_a_profile_names_one_set_or_a_list(write_profile) -> None:
    from kimi_serve.profile.loader import load_profile

    assert load_profile("prod").patch_set == (SM120, KIMI)  # prod runs both
    assert load_profile(str(write_profile(f"extends: prod\npatch_set: {SM120}\n"))).patch_set == (SM120,)
    assert load_profile(str(write_profile("extends: prod\npatch_set: null\n"))).patch_set == ()
    assert load_profile(str(write_profile("extends: prod\npatch_set: []\n"))).patch_set == ()


def test_a_set_named_twice_is_rejected(write_profile, cli) -> None:
    res = cli("render", "--profile", str(write_profile(f"extends: prod\npatch_set: [{SM120}, {SM120}]\n")))
    assert res.code == 2 and "patch_set" in res.err and "each name once" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_patches_commands_take_every_set_of_a_profile(site: Path, tmp_path: Path, cli, write_profile) -> None:
    """`patches apply|status|revert --profile P`: both of prod's sets in one command (revert newest first), one JSON
    document with a `sets` entry per set; --patch-set with --profile is a usage error; a set that fails reverts the sets
    this apply applied before it."""
    state = str(tmp_path / "state")
    pristine = snapshot(site)
    profile = write_profile(f"extends: sim\npatch_set: [{SM120}, {KIMI}]\n", name="both")
    where = ["--site-packages", str(site), "--state-dir", state, "--profile", str(profile)]
    st = cli("patches", "status", *where, "--json")
    assert st.code == 1
    doc = json.loads(st.out)
    assert [s["set"] for s in doc["sets"]] == [SM120, KIMI] and doc["ok"] is False
    assert any(f"--profile {profile}" in f["fix"] for f in doc["findings"] if f["status"] == "fail"), doc["findings"]
    done = cli("patches", "apply", *where, "--json")
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert doc["changed"] is True and [s["changed"] for s in doc["sets"]] == [True, True]
    assert cli("patches", "status", *where).code == 0
    assert json.loads(cli("patches", "apply", *where, "--json").out)["changed"] is False  # a no-op again
    back = cli("patches", "revert", *where)
    assert back.code == 0, back.err
    assert snapshot(site) == pristine
    mixed = cli("patches", "apply", *where, "--patch-set", KIMI)
    assert mixed.code == 2 and "--patch-set and --profile both name the patch sets" in mixed.err
    # all or none across sets: the Kimi set conflicts, so the SM120 set this apply applied first is reverted
    (site / DETECTOR).write_text((site / DETECTOR).read_text() + "\n# edited by hand\n")
    edited = snapshot(site)
    failed = cli("patches", "apply", *where)
    assert failed.code == 1, (failed.out, failed.err)
    assert snapshot(site) == edited
