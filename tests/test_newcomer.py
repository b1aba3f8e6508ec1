"""What a newcomer stumbled on (issue 26, item 4), as they would notice it: the command line's output."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from conformance.cli import COMMANDS, command, main
from mla_model.revisions import REVISIONS

MINI = Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py"
NEWEST = list(REVISIONS)[-1]


def run(*args: str, columns: int = 200, cwd: Path | None = None):
    """mla-spec ARGS in-process, at ``columns`` columns: (exit status, stdout, stderr)."""
    import contextlib

    with contextlib.chdir(cwd) if cwd else contextlib.nullcontext():
        result = CliRunner().invoke(
            main, [str(a) for a in args], prog_name="mla-spec", env={"COLUMNS": str(columns), "NO_COLOR": "1"}
        )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"mla-spec {args} raised {result.exception!r}") from result.exception
    return result.exit_code, result.stdout, result.stderr


# --- explain ---------------------------------------------------------------------------------------------

VIOLATED_CASE = ("--case", "gfx950-fp8-h4-q1-nospec-auto", "--revision", "vllm-0.27")


def test_explain_exits_1_on_a_shape_that_breaks_an_invariant_and_0_on_one_that_does_not():
    assert run("explain", *VIOLATED_CASE)[0] == 1
    assert run("explain", *VIOLATED_CASE, "--format", "json")[0] == 1
    assert run("explain", "--case", "gfx950-fp8-h4-q1-nospec-auto", "--revision", "vllm-0.28")[0] == 0
    assert "Exit status" in run("explain", "--help")[1]


def test_explain_shows_the_broken_invariants_first_and_one_line_for_the_rest():
    _, out, _ = run("explain", *VIOLATED_CASE)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if "VIOLATED" in line)
    assert not any(line.strip().endswith(": holds") for line in lines), out
    assert lines[-1].strip() == "the other 18 invariants hold (--all lists them)", out
    assert "fp8-never-reaches-gluon: VIOLATED" in lines[first]
    _, every, _ = run("explain", *VIOLATED_CASE, "--all")
    assert sum(line.strip().endswith(": holds") for line in every.splitlines()) == 18


def test_explain_draws_each_gate_as_its_and_or_tree():
    """0.34's Gluon decode gate: an all-of whose mode condition is an any-of, indented under it."""
    _, out, _ = run("explain", "--arch", "gfx942", "--kv-cache-dtype", "fp8", "--num-heads", "8")
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  use_gluon_decode = False"))
    assert lines[start].endswith("<- all of:"), lines[start]
    nested = next(i for i in range(start + 1, len(lines)) if lines[i].endswith("any of:"))
    assert lines[nested].startswith("    yes any of:") and lines[nested + 1].startswith("        ")
    assert "asm_padding_mode == gluon" in lines[nested + 1] + lines[nested + 2]


def test_explain_says_which_fields_it_took_by_default_and_defaults_to_the_newest_revision():
    _, out, _ = run("explain", "--arch", "gfx942", "--kv-cache-dtype", "fp8", "--num-heads", "8")
    assert out.splitlines()[0].endswith(f"on {NEWEST} with aiter-0.1.20"), out
    defaulted = out.splitlines()[1]
    assert defaulted.startswith("  defaulted (no flag or case id gave them): q_dtype=fp8, dcp_world_size=1")
    assert "arch=" not in defaulted and "num_heads=" not in defaulted
    _, given, _ = run("explain", *VIOLATED_CASE)  # a case id gives every field
    assert "defaulted" not in given


def test_explain_kv_cache_dtype_help_says_what_it_is():
    _, out, _ = run("explain", "--help")
    option = next(p for p in command("explain").params if p.name == "kv_cache_dtype")
    assert option.help != "--kv-cache-dtype" and "fp8*: a quantised cache" in option.help
    assert "(default: auto)" in option.help and "quantised" in out


# --- graph ---------------------------------------------------------------------------------------------


def test_graph_defaults_to_the_newest_revision_and_lists_the_revisions():
    code, out, _ = run("graph")
    assert code == 0 and out.startswith(f"{NEWEST} with aiter-0.1.20"), out[:200]
    code, _, err = run("graph", "--revision", "vllm-9.99")
    assert code == 2 and f"'vllm-9.99' is not one of {', '.join(repr(r) for r in REVISIONS)}" in err
    _, help_text, _ = run("graph", "--help", columns=300)
    assert "--revision [" + "|".join(REVISIONS) + "]" in help_text


def test_graph_names_the_fp8_gluon_symptom_as_check_does():
    """vLLM 0.27 sends fp8 caches to Gluon: the leaf says the output is off by the cache's scale, as check
    says, not "silent NaN"."""
    _, out, _ = run("graph", "--revision", "vllm-0.27")
    leaf = next(line for line in out.splitlines() if "fp8 KV read with kv_scale=1.0" in line)
    assert "NaN" not in out and "attention off by that scale" in leaf
    _, check, _ = run(
        "check",
        "--no-expect",
        "--revision",
        "vllm-0.27",
        "--invariant",
        "fp8-never-reaches-gluon",
        "--format",
        "json",
    )
    symptoms = {c["symptom"] for r in json.loads(check)["results"] for c in r["counterexamples"]}
    assert any(leaf.split(": ", 1)[1] in symptom for symptom in symptoms), (leaf, symptoms)


def test_the_0_34_graph_draws_asm_kernels_in_labelled_groups(tmp_path):
    """Not 36 unlabelled edges out of asm_persistent: one edge a group (arch and request flags), each
    group labelled with how many kernels it holds."""
    from conformance.cli.render.graph import fan, kernel_group
    from spec.analyses.graph import routing_graph

    g = routing_graph(NEWEST, "aiter-0.1.20")
    kernels = [v for v in g.successors("asm_persistent") if kernel_group(g, v)]
    groups = {kernel_group(g, v) for v in kernels}
    assert len(kernels) > 30 and len(groups) <= 8, groups
    assert "gfx950 · DCP round-robin (LSE, CPRR)" in groups
    members = {grp: [v for v in kernels if kernel_group(g, v) == grp] for grp in groups}
    grouped = {("asm_persistent", v) for vs in members.values() if len(vs) > 1 for v in vs}
    pos = {n: (0.0, -float(i)) for i, n in enumerate(g.nodes)}
    fan = fan(
        g,
        "asm_persistent",
        pos,
        grouped,
        {("asm_persistent", k): vs for k, vs in members.items() if len(vs) > 1},
    )
    assert len(fan) <= 12, fan
    code, out, _ = run("graph", "--out", tmp_path / "g.png")
    assert code == 0 and (tmp_path / "g.png").stat().st_size > 0, out


# --- check's table at 80 columns ----------------------------------------------------------------------------


def test_check_table_fits_80_columns_with_every_count_and_surprise_marker(tmp_path):
    """A gate file by path, with surprises against a manifest that expects every verdict PROVED: at 80
    columns every count and every ! is there, the path folds, and a legend says what the short cells mean."""
    deep = tmp_path / "a" / "vllm" / "v1" / "attention" / "backends" / "mla" / "rocm_aiter_mla.py"
    deep.parent.mkdir(parents=True)
    deep.write_text(MINI.read_text())
    manifest = tmp_path / "all-proved.toml"
    manifest.write_text('[[expect]]\nrevision = "*"\ninvariant = "*"\nverdict = "PROVED"\nreason = "hoped"\n')
    invariants = ["--invariant", "kernel-exists", "--invariant", "persistent-metadata-used"]
    for columns in (80, 64):  # at 64 the long cells do not fit: VIOL n, WARN n, and a legend
        code, out, _ = run("check", str(deep), *invariants, "--expect", manifest, columns=columns)
        table = out.split("\n\n")[0].splitlines()
        assert code == 1 and max(len(line) for line in table) <= columns, out
        assert not any("…│" in line.replace(" ", "") for line in table), out  # no cell cut
        row = next(line for line in table if "kernel-exists" in line)
        assert len(re.findall(r"(VIOLATED \(8\)|VIOL 8) !", row)) == 2, row
        warning = next(line for line in table if "persistent-metadata-used" in line)
        assert len(re.findall(r"(WARNING \(1\)|WARN 1) !", warning)) == 2, warning
        legend = "VIOL n: VIOLATED with n counterexample classes"
        assert (legend in out.replace("\n", " ")) == ("VIOL 8" in row), out


# --- every command's --help ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_ends_with_examples_that_parse(name):
    """Each example is one mla-spec command line whose options and choices the command accepts."""
    _, out, _ = run(name, "--help")
    assert "\n  Examples:\n" in out, out
    examples = [line.strip() for line in out.split("\n  Examples:\n", 1)[1].splitlines() if line.strip()]
    assert examples and all(e.startswith(f"mla-spec {name}") for e in examples), examples
    cmd = command(name)
    for example in examples:
        args = shlex.split(example.split(" > ")[0])[2:]
        try:
            cmd.make_context(name, args)
        except click.ClickException as e:
            raise AssertionError(f"{example}: {e.format_message()}") from None


# --- the docs a newcomer reads first ---------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def test_readme_exit_statuses_follow_checks_manifest_and_name_the_warning_cells():
    readme = (REPO / "README.md").read_text()
    status = readme[readme.index("Exit status:") :].split("\n\n")[0]
    assert "0 all proved" not in status and "1 something violated" not in status
    assert "manifest" in status and "WARNING" in status and "4 (`diff`) an" in " ".join(status.split())
    quickstart = (REPO / "docs" / "tutorial" / "quickstart.md").read_text()
    assert "`WARNING (n)`" in quickstart


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_is_documented_and_its_script_comes_out(shell):
    readme = (REPO / "README.md").read_text()
    assert f"_MLA_SPEC_COMPLETE={shell}_source mla-spec" in readme
    result = CliRunner().invoke(main, [], prog_name="mla-spec", env={"_MLA_SPEC_COMPLETE": f"{shell}_source"})
    assert result.exit_code == 0 and "_MLA_SPEC_COMPLETE" in result.stdout, result.output


def test_bash_completion_completes_commands_and_revision_choices():
    def complete(words: str) -> list[str]:
        env = {
            "_MLA_SPEC_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1),
        }
        result = CliRunner().invoke(main, [], prog_name="mla-spec", env=env)
        return [line.split(",", 1)[1] for line in result.stdout.splitlines()]

    assert complete("mla-spec gr") == ["graph"]
    assert complete("mla-spec graph --revision vllm-0.3") == [
        r for r in REVISIONS if r.startswith("vllm-0.3")
    ]


def test_change_a_gate_starts_from_the_newest_release():
    from conformance.docgen import EXAMPLE_RELEASE
    from mla_model.revisions import RELEASE_OF_REVISION

    assert EXAMPLE_RELEASE == RELEASE_OF_REVISION[NEWEST]
    page = (REPO / "docs" / "how-to" / "change-a-gate.md").read_text()
    assert f"/vllm/{EXAMPLE_RELEASE}/tree/vllm/v1/attention/backends/mla/rocm_aiter_mla.py old.py" in page
    assert "--revision vllm-0.28" not in page.split("## 4.")[0]
