"""The docs speak of the software as it is: no commit hashes, issue numbers or
labels of periods of work ("session 21", "round 3", "run2") in docs/, the
READMEs or the names of the result files, no story of the work (what changed,
what it was) in the docs or in the comments of the code, and every file of
the tree a doc cites exists."""
import glob
import os
import re

import pytest

pytestmark = pytest.mark.source_tree("the docs")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = sorted([os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
              + glob.glob(os.path.join(ROOT, "docs", "*.md"))
              + glob.glob(os.path.join(ROOT, "examples", "*", "README.md")))

# A git hash: 7-40 hex digits with a digit and a letter, standing alone or at
# the end of a file name (foo_77d904f.txt); not a 0x constant or a #colour.
HASH = re.compile(r"(?<![0-9A-Za-z#])(?<!0x)(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])")
# A bare issue number (#32, "issue 16", "issue-16"); owner/repo#27 cites an
# external tracker and is allowed.
ISSUE = re.compile(r"(?<![\w/.-])#\d+\b|\b[Ii]ssues? ?[-#]?\d+\b")
# A period of work.
PERIOD = re.compile(r"\b[Ss]essions? \d+\b|\bthis session\b|\b[Rr]ound \d+ of the work\b|\b[Rr]ound \d+\b(?! of \d)"
                    r"|(?:\b|_)run ?\d+\b|_[A-Z]\.(?:json|txt)\b|_committed\b")


def prose(text):
    """The text without fenced code blocks (shell sessions, program output)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def violations(text):
    found = []
    for lineno, line in enumerate(prose(text).splitlines(), 1):
        for kind, pattern in (("commit hash", HASH), ("issue number", ISSUE), ("period of work", PERIOD)):
            found += [f"{lineno}: {kind} {m.group(0)!r}: {line.strip()[:120]}" for m in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_has_no_history(path):
    with open(path, encoding="utf-8") as f:
        found = violations(f.read())
    assert not found, f"{os.path.relpath(path, ROOT)} speaks of the work, not the software:\n" + "\n".join(found)


def test_result_file_names_have_no_history():
    names = os.listdir(os.path.join(ROOT, "benchmarks", "results"))
    found = [n for n in names if violations(n.replace("_", " ").replace(".", " "))]
    assert not found, f"benchmarks/results: names with a hash, issue or period of work: {found}"


# A path in the tree a doc cites: `benchmarks/results/x.json`, (../docs/X.md), ...
CITED = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:benchmarks|docs|examples|kernels|python|tests|tools|ops|grappler)"
                   r"/[\w./-]*\w)")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_cited_files_exist(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    base = os.path.dirname(path)
    missing = []
    for m in CITED.finditer(text):
        cited = m.group(1)
        # A pattern, not a file: `nerf_<scene>.<device>.json`, `ab_*.json`.
        pattern = any(c in text[m.start(1):m.end(1) + 2] for c in "*<>{}$")
        if pattern or cited.endswith("/..."):
            continue
        candidates = [os.path.join(base, cited), os.path.join(ROOT, cited.lstrip("./"))]
        if not any(os.path.exists(c) for c in candidates):
            missing.append(cited)
    results = [c for c in missing if "benchmarks/results/" in c]
    assert not results, f"{os.path.relpath(path, ROOT)} cites result files that do not exist: {sorted(set(results))}"
    # The sources: a doc that names a file of the code names one that is there.
    sources = [c for c in missing if re.match(r"(?:\.\./)*(?:kernels|ops|grappler|tools)/", c)]
    assert not sources, f"{os.path.relpath(path, ROOT)} cites sources that do not exist: {sorted(set(sources))}"


# A pattern of source files a doc cites: `kernels/<op>/<op>_spec.h`,
# `kernels/*/*.metal`, `kernels/sh_encode/sh_encode{_cuda.h,.cu.cc}`.
CITED_PATTERN = re.compile(r"(?<![\w/.-])((?:kernels|ops|grappler|tools)/[\w./<>*{},-]*[<>*{}][\w./<>*{},-]*[\w>*}])")


def pattern_glob(pattern):
    """The glob patterns of a cited pattern: <name> and * for any name, {a,b} for either."""
    alternatives = re.search(r"\{([^{}]*)\}", pattern)
    if alternatives:
        head, tail = pattern[:alternatives.start()], pattern[alternatives.end():]
        return [g for alt in alternatives.group(1).split(",") for g in pattern_glob(head + alt + tail)]
    return [re.sub(r"<[^<>]*>", "*", pattern)]


def test_pattern_glob_reads_placeholders_and_alternatives():
    assert pattern_glob("kernels/<op>/<op>_plan.{h,cc}") == ["kernels/*/*_plan.h", "kernels/*/*_plan.cc"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_cited_source_patterns_match_files(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    unmatched = [m.group(1) for m in CITED_PATTERN.finditer(text)
                 if not all(glob.glob(os.path.join(ROOT, g)) for g in pattern_glob(m.group(1)))]
    assert not unmatched, f"{os.path.relpath(path, ROOT)} cites patterns no source matches: {sorted(set(unmatched))}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_result_files_named_alone_exist(path):
    """A result file cited by its name alone (`nerf_demo.h100.json`)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    results = set(os.listdir(os.path.join(ROOT, "benchmarks", "results")))
    named = set(re.findall(r"\b([a-z0-9_]+\.(?:cpu|h100|h200)\.(?:json|png))\b", text))
    assert named <= results, f"{os.path.relpath(path, ROOT)} names result files that do not exist: {named - results}"


# ---- words of the work: the software told as it is, not how it came to be ----
# Narrative words in prose and comments: the samples of the unit test below.
# Each pattern is narrow enough to leave ordinary English alone (the idioms
# "now and then" and "from now on", a passive "is used to", "call X before Y",
# which orders two steps).
NARRATIVE = re.compile(
    r"\bnow\b(?! and then)(?<!\bfrom now)(?! on\b)(?!\s*\()"
    r"|(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )(?<!\bwas )(?<!\bwere )(?<!\bget )(?<!\bgets )"
    r"(?<!\bgot )\bused to\b"
    r"|\b(?:fixed|found) (?:in|by) (?:this suite|commit|\S+\.(?:py|h|cc|mm|md)\b)"
    r"|\bno longer (?:needed|used|supported|required|necessary|exists?|true|the case|works?)\b"
    r"|\b(?:previously|formerly|nowadays|anymore|these days|until recently)\b"
    r"|\bas before\b"
    r"|\b(?:before|after|since|until) (?:this|the|that) (?:change|fix|commit|move|rewrite|refactor(?:ing)?"
    r"|patch|merge|restructuring)\b"
    r"|\b(?:was|were|has been|have been|got) (?:changed|moved|renamed|replaced|rewritten|fixed|removed)\b",
    re.I)


def narrative(text):
    """The narrative phrases of prose text, with what surrounds them."""
    text = re.sub(r"`[^`\n]*`", "``", text)  # code spans: identifiers, commands
    return [text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ").strip() for m in NARRATIVE.finditer(text)]


def test_narrative_checker_catches_the_work_and_leaves_english_alone():
    work = ["The library now loads at import.", "fusion.enable() used to abort.",
            "Regression (found by this suite, fixed in robust_loss.h).", "The flag is no longer needed.",
            "The tree before the move had twelve folders.", "Loads as before.", "It was renamed to x.",
            "Previously the op ran on the CPU."]
    english = ["Call load_library() before the first op.", "The pool is used to shard work.",
               "Threads fail now and then.", "XLA compiles the ops from now on.", "A step no longer than h.",
               "The least recently used graph is dropped.", "t = time.now()", "`datetime.now()` is UTC.",
               "Run it before each release.", "Time it before and after a refactoring.", "The last step's counts are read while this one runs."]
    assert [s for s in work if not narrative(s)] == []
    assert [s for s in english if narrative(s)] == []


def comments(path, text):
    """The comments and docstrings of a source file (C-family: // and /* */;
    Python: # and triple-quoted strings; shell, make, YAML: #)."""
    if path.endswith(".py"):
        import io
        import tokenize
        out = []
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU")[:3]
                                                    in ('"""', "'''")):
                    out.append(tok.string)
        except (tokenize.TokenError, SyntaxError):
            pass
        return "\n".join(out)
    if path.endswith((".h", ".cc", ".mm", ".metal", ".cu")):
        code = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)  # string literals ("http://...")
        return "\n".join(re.findall(r"//[^\n]*|/\*.*?\*/", code, flags=re.S))
    return "\n".join(re.findall(r"(?:^|\s)(#[^\n]*)", text))


SOURCE = re.compile(r"\.(?:py|h|cc|mm|metal|cu|sh|bzl|yml)$|(?:^|/)(?:Makefile|BUILD)$")


def source_files():
    skip = {".git", ".venv", "build", "third_party", "results", "__pycache__", "node_modules"}
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith((".", "venv"))]
        for f in files:
            path = os.path.join(top, f)
            if SOURCE.search(os.path.relpath(path, ROOT)):
                yield path


def test_comments_are_read_from_each_language_and_code_is_not():
    cc = 'const char* url = "http://x.org/now";  // The op now runs on Metal.\n/* It used to abort. */\n'
    py = '"""The loader used to be lazy."""\nnow = clock()  # fixed in fusion.py\n'
    sh = 'now=1  # Previously a flag.\n'
    assert len(narrative(comments("a.cc", cc))) == 2
    assert len(narrative(comments("a.py", py))) == 2
    assert len(narrative(comments("a.sh", sh))) == 1
    assert narrative(comments("a.cc", 'f("now");  // ok\n')) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_tells_no_story_of_the_work(path):
    with open(path, encoding="utf-8") as f:
        found = narrative(prose(f.read()))
    assert not found, f"{os.path.relpath(path, ROOT)} tells the story of the work:\n" + "\n".join(found)


def test_code_comments_tell_no_story_of_the_work():
    found = []
    for path in source_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            found += [f"{os.path.relpath(path, ROOT)}: {s}" for s in narrative(comments(path, f.read()))]
    assert not found, "comments that tell the story of the work:\n" + "\n".join(found)


# ---- figures told as runs: a doc says what the software does, not which run, version or host gave what ----
# The phrases of a lab notebook: versions compared with earlier ones, hosts
# other than the one a result file names, runs interleaved with other runs.
# Figures belong in the tables generated from benchmarks/results, whose rows
# name the version and the machine (docs/PERFORMANCE.md).
NARRATION = re.compile(
    r"\ban earlier\b|\b(?:earlier|previous|older|former) versions?\b|\bthe versions? before\b"
    r"|\banother host\b|\bother hosts\b|\bhosts? of (?:its|their) own\b|\binterleaved\b"
    r"|\b(?:was|were) (?:slower|faster|available|tried|never)\b|\bat the time of writing\b"
    r"|\b(?:earlier|previous|second|third|fourth) runs?\b(?!'s)",
    re.I)


def narration(text):
    """The lines of a doc's prose (code blocks and code spans left out) that narrate runs, versions or hosts."""
    found = []
    for lineno, line in enumerate(prose(text).splitlines(), 1):
        line = re.sub(r"`[^`\n]*`", "``", line)
        found += [f"{lineno}: {m.group(0)!r}: {line.strip()[:160]}" for m in NARRATION.finditer(line)]
    return found


def test_narration_checker_catches_the_notebook_and_leaves_the_reference_alone():
    notebook = ["an earlier version on another host 8.8 s and 3.2 s",
                "three of the version before interleaved with them (`version_before_runs`)",
                "1.70x in an earlier run", "2.8-3.8 s in four runs on another host of the kind",
                "the first step took 2.7 s, interleaved with the row above",
                "a copy was slower in interleaved A/B runs", "N = 2^16 (third run): forward 26.6 ms",
                "an idle machine was never available to measure on"]
    reference = ["Each round runs every contender once, in alternating rounds.",
                 "The second run's figures load the programs from DIR.", "Blackwell and later run the PTX.",
                 "the `interleaved` function of the harness", "The version is read from pyproject.toml.",
                 "the conditions they were measured under"]
    assert [s for s in notebook if not narration(s)] == []
    assert [s for s in reference if narration(s)] == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_narrates_no_run_version_or_host(path):
    with open(path, encoding="utf-8") as f:
        found = narration(f.read())
    assert not found, f"{os.path.relpath(path, ROOT)} narrates runs, versions or hosts:\n" + "\n".join(found)


@pytest.mark.parametrize("path, most", [("examples/nerf/README.md", 300), ("docs/NERF.md", 400)])
def test_nerf_sample_docs_stay_short(path, most):
    """The sample's README says what it is and what to run; docs/NERF.md how it works."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().count("\n")
    assert lines <= most, f"{path}: {lines} lines, at most {most}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_doc_has_no_heading_twice(path):
    with open(path, encoding="utf-8") as f:
        headings = re.findall(r"^(#+ .*)$", prose(f.read()), flags=re.M)
    assert sorted({h for h in headings if headings.count(h) > 1}) == [], os.path.relpath(path, ROOT)
