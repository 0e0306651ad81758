"""Host facts that `check` (host layer), `doctor` and `up`'s preflight share, one rule and message everywhere: a model
(or draft) directory (config.json, every shard the index names, tokenizer files unless SGLang skips the tokenizer),
and the profile's patch sets against the SGLang that will serve."""

from __future__ import annotations

from pathlib import Path

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.family import family
from kimi_serve.core.findings import FAIL, PASS, Finding
from kimi_serve.core.inputs import load_json
from kimi_serve.profile.loader import Profile

TOKENIZER_FILES = ("tiktoken.model", "tokenizer.json", "tokenizer.model")
DOWNLOAD_HINT = "download it: hf download {repo} --local-dir {path}"


def model_findings(p: Profile, *, layer: str, codes: tuple[str, str] = ("model", "draft")) -> list[Finding]:
    """The model and (with EAGLE-3) the draft directory of an ``engine: sglang`` profile; the download hints name the
    family's repositories (core/family.py)."""
    fam = family(p.model.family)
    args = " ".join(p.extra_args)
    out = check_model_dir(
        p.model.path,
        codes[0],
        "model",
        repo=fam.repo,
        layer=layer,
        where=p.where("model.path"),
        tokenizer="--skip-tokenizer-init" not in args,
        weights="--load-format dummy" not in args,
    )
    if p.speculative.enabled and p.speculative.draft_model_path:
        base = Path(p.speculative.draft_model_path).name.lower()
        draft = next((d for d in fam.drafts if d.name == base), fam.drafts[0] if fam.drafts else None)
        out += check_model_dir(
            p.speculative.draft_model_path,
            codes[1],
            "EAGLE-3 draft",
            repo=draft.repo if draft else "the draft's repository",
            layer=layer,
            where=p.where("speculative.draft_model_path"),
            tokenizer=False,
        )
    return out


def check_model_dir(
    path: str,
    name: str,
    what: str,
    *,
    repo: str,
    tokenizer: bool,
    weights: bool = True,
    layer: str = "doctor",
    where: str = "",
) -> list[Finding]:
    def _f(code: str, status: str, message: str, fix: str = "") -> Finding:
        return Finding(layer, code, status, message, fix, where if status == FAIL else "")

    d = Path(path)
    fix = DOWNLOAD_HINT.format(repo=repo, path=path)
    if not d.is_dir():
        return [_f(name, FAIL, f"{what} directory {path} does not exist", fix)]
    try:
        config = load_json((d / "config.json").read_text())
        kind = config.get("model_type", "?") if isinstance(config, dict) else "?"
    except (OSError, ValueError) as exc:
        return [_f(name, FAIL, f"{path}/config.json is missing or not JSON ({exc.__class__.__name__})", fix)]
    present = {q.name for q in d.glob("*.safetensors")}
    index = d / "model.safetensors.index.json"
    out = []
    if not weights:
        out.append(_f(name, PASS, f"{what} at {path}: model_type {kind} (--load-format dummy: no shards needed)"))
    elif index.is_file():
        try:
            expected = {str(v) for v in load_json(index.read_text())["weight_map"].values()}
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
            return [_f(name, FAIL, f"{index} is unreadable ({exc.__class__.__name__})", fix)]
        missing = sorted(expected - present)
        if missing:
            message = f"{what} at {path}: {len(missing)} of {len(expected)} shards missing (first: {missing[0]})"
            out.append(_f(name, FAIL, message, f"finish the download: {fix}"))
        else:
            out.append(_f(name, PASS, f"{what} at {path}: model_type {kind}, all {len(expected)} shards present"))
    elif present:
        out.append(_f(name, PASS, f"{what} at {path}: model_type {kind}, {len(present)} shard(s), no index"))
    else:
        out.append(_f(name, FAIL, f"{what} at {path} has no *.safetensors shards", fix))
    if tokenizer:
        found = [t for t in TOKENIZER_FILES if (d / t).is_file()]
        if not (d / "tokenizer_config.json").is_file() or not found:
            lacks = f"tokenizer files (tokenizer_config.json and one of {', '.join(TOKENIZER_FILES)})"
            out.append(_f(f"{name}.tokenizer", FAIL, f"{path} lacks {lacks}", fix))
        else:
            out.append(_f(f"{name}.tokenizer", PASS, f"tokenizer: tokenizer_config.json, {found[0]}"))
    return out


def patch_state_finding(
    p: Profile, site: Path, *, python: str, state_dir: Path | None, layer: str, code: str
) -> Finding:
    """Are the profile's patch sets (all of them) applied to the SGLang in ``site`` (the one ``python`` imports)?"""
    assert p.patch_set, "asked only of a profile that names a patch set"
    applied = []
    for name in p.patch_set:
        finding = _set_state_finding(p, name, site, python=python, state_dir=state_dir, layer=layer, code=code)
        if finding.status != PASS:
            return finding
        applied.append(finding.message.removeprefix("patch set "))
    return Finding(layer, code, PASS, "patch set " + "; ".join(applied))


def _set_state_finding(
    p: Profile, name: str, site: Path, *, python: str, state_dir: Path | None, layer: str, code: str
) -> Finding:
    from kimi_serve.core.pin import patches_apply
    from kimi_serve.patches import load_patch_set, status

    apply = patches_apply(p.cli_args())  # every set of the profile, into the SGLang `python` is (check/launch.py)
    try:
        st = status(site, load_patch_set(name), state_dir=state_dir)
    except KimiServeError as exc:
        return Finding(layer, code, FAIL, f"patch set {name}: {exc.message}", exc.hint or apply, p.where("python"))
    if st.all_applied:
        return Finding(layer, code, PASS, f"patch set {name} applied to {st.site_packages} ({len(st.patches)} patches)")
    if st.conflicts:
        c = st.conflicts[0]
        message = f"patch set {name}: {c.name} conflicts with local changes in {st.site_packages}: {c.detail}"
        return Finding(layer, code, FAIL, message, f"reinstall sglang=={st.target_version}, then {apply}")
    todo = [r.name for r in st.patches if r.state.value != "applied"]
    missing = f"({len(todo)} of {len(st.patches)} patches missing)"
    return Finding(layer, code, FAIL, f"patch set {name} is not applied to {st.site_packages} {missing}", apply)
