from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_shows_the_example_experiment_verbatim():
    # the README's experiment example is examples/mixed.yaml, which a netns test runs
    assert (ROOT / "examples/mixed.yaml").read_text() in (ROOT / "README.md").read_text()
