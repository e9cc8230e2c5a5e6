"""README's samples of nvsharectl output are what the code prints (tools/readme_samples.py renders
them from one fixed node with the real renderers; `python3 tools/readme_samples.py --write`
rewrites them after a change of the output)."""

from tools import readme_samples


def test_readme_samples_are_what_the_code_prints():
    text = readme_samples.README.read_text()
    _, differ = readme_samples.check(text)
    assert differ == [], (f"README.md's samples {differ} are stale: run "
                          "python3 tools/readme_samples.py --write")


def test_every_sample_is_in_readme():
    names = {m.group("name") for m in readme_samples.MARKER.finditer(readme_samples.README.read_text())}
    assert names == set(readme_samples.SAMPLES)


def test_a_stale_sample_is_found_and_rewritten():
    text = readme_samples.README.read_text()
    stale = text.replace("auto: concurrent", "auto: exclusive", 1)
    new, differ = readme_samples.check(stale)
    assert differ == ["status-80"] and new == text
