"""benchmarks/results holds one current file per benchmark and device, each
with its command, commit, date and machine, and docs/PERFORMANCE.md is what
`python -m benchmarks.report` makes of them."""
import json
import os
import re

import pytest

from benchmarks import report, timing

pytestmark = pytest.mark.source_tree("benchmarks/ and docs/PERFORMANCE.md")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
NAME = re.compile(r"^([a-z0-9]+(?:_[a-z0-9]+)*)\.([a-z0-9_]+)\.(json|png)$")
FIELDS = ("benchmark", "device", "command", "commit", "version", "date", "machine")


def test_performance_doc_is_generated_from_the_results():
    with open(report.DOC, encoding="utf-8") as f:
        current = f.read()
    assert current == report.render(), (
        "docs/PERFORMANCE.md is not what `python -m benchmarks.report` (make perf-doc) writes from "
        "benchmarks/results: run it")


@pytest.mark.parametrize("name", sorted(os.listdir(RESULTS)))
def test_result_file_is_named_benchmark_device(name):
    assert NAME.match(name), f"benchmarks/results/{name}: not <benchmark>.<device>.json (or .png)"
    if name.endswith(".png"):
        assert os.path.exists(os.path.join(RESULTS, name[:-len(".png")] + ".json")), \
            f"benchmarks/results/{name}: no result file of its own beside it"


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(RESULTS) if n.endswith(".json")))
def test_result_file_records_where_and_how(name):
    with open(os.path.join(RESULTS, name)) as f:
        data = json.load(f)
    missing = [k for k in FIELDS if k not in data]
    assert not missing, f"benchmarks/results/{name} lacks {missing}"
    benchmark, device, _ = NAME.match(name).groups()
    assert (data["benchmark"], data["device"]) == (benchmark, device), name
    assert re.match(r"^\d{4}-\d\d-\d\dT", data["date"]), name
    assert {"cpu", "gpu", "tensorflow", "python"} <= set(data["machine"]), name


def test_write_json_adds_the_record_fields(tmp_path):
    path = timing.result_path("example", "cpu").replace(timing.RESULTS, str(tmp_path))
    timing.write_json(path, {"device": "NVIDIA H100 80GB HBM3", "rows": [{"ms": 1.0}]})
    with open(path) as f:
        data = json.load(f)
    assert list(data)[:len(FIELDS)] == list(FIELDS)
    assert (data["benchmark"], data["device"]) == ("example", "cpu")
    assert data["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert data["commit"] == "unknown" or re.match(r"^[0-9a-f]{7,40}(\+dirty)?$|^.+-g[0-9a-f]+(\+dirty)?$",
                                                   data["commit"])
    assert data["rows"] == [{"ms": 1.0}]
    assert re.match(r"^\d+\.\d+\.\d+", data["version"]), data["version"]


@pytest.mark.parametrize("name, label", [("NVIDIA H100 80GB HBM3", "h100"), ("GPU: NVIDIA H200, compute "
                                         "capability 9.0", "h200"), (None, "cpu"), ("CPU: AMD EPYC", "cpu")])
def test_device_label(name, label):
    assert timing.device_label(name) == label


def test_a_result_without_a_section_still_gets_one():
    text = report.render({"new_op.cpu": {"benchmark": "new_op", "device": "cpu", "command": "python -m x",
                                         "date": "2026-01-01T00:00:00+00:00", "machine": {"cpu": "c"},
                                         "rows": [{"n": 4, "ours_ms": 1.5}]}})
    assert "## new_op.cpu" in text and "| unknown | c | 4 | 1.50 |" in text and "`python -m x`" in text


def test_sections_have_one_heading_each_and_tables_name_version_and_machine():
    text = report.render()
    headings = re.findall(r"^## (.*)$", text, flags=re.M)
    assert sorted(h for h in set(headings) if headings.count(h) > 1) == [], "a heading twice in docs/PERFORMANCE.md"
    headers = [line for line in text.splitlines() if line.startswith("| ") and
               text.splitlines()[text.splitlines().index(line) + 1].startswith("| ---")]
    assert headers and all(" version | machine |" in h for h in headers), \
        [h for h in headers if " version | machine |" not in h]


def test_ops_come_first():
    titles = [title or key[0] for title, _, key in report.order(report.load())]
    first_other = min(titles.index(k) for k in titles if k in report.SECTIONS or k in
                      [g[0] for g in report.GROUPS])
    ops = {k for k in report.benchmark_sections() if k not in report.SECTIONS}
    assert all(t in ops for t in titles[:first_other]) and not ops & set(titles[first_other:])


def test_every_result_file_has_its_section():
    """Each result file's title, line and columns come from the benchmark
    module that writes it (its REPORT) or from report.SECTIONS; and each
    section is of a result file."""
    sections, results = report.benchmark_sections(), report.load()
    assert sorted(set(results) - set(sections)) == [], "result files without a section (REPORT of their benchmark)"
    assert sorted(set(sections) - set(results)) == [], "sections of no result file"
    assert {"zero_out.cpu", "sh_encode.cpu", "fused_mlp_gpu_strict.h100"} <= set(sections) - set(report.SECTIONS)
    assert set(report.ROWS) <= set(sections)


def test_a_benchmark_module_report_is_read_with_its_constants(tmp_path):
    module = tmp_path / "bench_x.py"
    module.write_text('import os\nCOLUMNS = [("N", "n")]\nREPORT = {"x.cpu": ("X", "about", COLUMNS)}\n'
                      'def main():\n    pass\n')
    assert report._report_of(str(module)) == {"x.cpu": ("X", "about", [("N", "n")])}
    module.write_text("def main():\n    pass\n")
    assert report._report_of(str(module)) == {}


def test_nerf_readme_results_are_generated_from_the_results():
    with open(report.NERF_README, encoding="utf-8") as f:
        current = f.read()
    assert current == report.with_nerf_results(current), (
        "examples/nerf/README.md's results table is not what `python -m benchmarks.report` writes: run it")
    assert "| 0.1.0 |" in report.with_nerf_results(current, {"nerf_demo.cpu": {
        "version": "0.1.0", "machine": {"cpu": "c", "cores": 2}, "step": 3000, "train_seconds": 190.0,
        "test_psnr_mean": 31.4}})


CITED_SECTION = re.compile(r'PERFORMANCE\.md\]\([^)]*\)[,:]?\s*\(?("[^"]+"(?:(?:,\s*|\s+and\s+|,\s+and\s+)"[^"]+")*)')


def cited_sections(text):
    """The section titles of docs/PERFORMANCE.md a doc names after its link."""
    text = " ".join(text.split())
    return [t for m in CITED_SECTION.finditer(text) for t in re.findall(r'"([^"]+)"', m.group(1))]


def test_cited_sections_are_read_after_the_link():
    text = ('[PERFORMANCE.md](PERFORMANCE.md), "A on the CPU" and\n"B CUDA"; see "C".'
            ' [PERFORMANCE.md](PERFORMANCE.md) ("D")')
    assert cited_sections(text) == ["A on the CPU", "B CUDA", "D"]


def test_docs_cite_sections_that_exist():
    import glob
    titles = set(re.findall(r"^## (.*)$", report.render(), flags=re.M))
    paths = [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md")) \
        + glob.glob(os.path.join(ROOT, "examples", "*", "README.md"))
    missing = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            missing += [f"{os.path.relpath(path, ROOT)}: {t!r}" for t in cited_sections(f.read()) if t not in titles]
    assert not missing, "sections of docs/PERFORMANCE.md cited but not there:\n" + "\n".join(missing)
