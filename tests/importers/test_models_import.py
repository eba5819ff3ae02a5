"""config.json -> model profile: the same shapes, parameter counts and estimate as the hand-written
profile of the same model, within 2 % of the published count; unknown architectures exit 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from simulator.analytic.architecture import active_params, total_params
from simulator.analytic.estimate import estimate
from simulator.analytic.layouts import Question, deploy
from simulator.cli import main
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.io.hf_config import profile_from_config

CONFIGS = Path(__file__).parent / "fixtures" / "hf_configs"
MODELS = sorted(p.name for p in CONFIGS.iterdir())
_CANDIDATES = (
    Path("/work/shared/reference/models.csv"),
    Path(__file__).parents[3] / "shared" / "reference" / "models.csv",
)
REFERENCE = next((p for p in _CANDIDATES if p.is_file()), None)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog()


@pytest.mark.parametrize("model", MODELS)
def test_imported_profile_counts_what_the_bundled_one_does(model, catalog) -> None:
    imported, bundled = profile_from_config(CONFIGS / model / "config.json"), catalog.model(model)
    assert total_params(imported) == pytest.approx(total_params(bundled), rel=1e-12)
    assert active_params(imported) == pytest.approx(active_params(bundled), rel=1e-12)
    assert total_params(imported) == pytest.approx(bundled.published.params_total.value, rel=0.02)
    assert imported.attention == bundled.attention.model_copy(
        update={"sliding_window": bundled.attention.sliding_window}
    )
    assert imported.native_precision == bundled.native_precision


@pytest.mark.parametrize("model", MODELS)
def test_imported_profile_gives_the_same_estimate(model, catalog) -> None:
    imported = profile_from_config(CONFIGS / model / "config.json")
    question = Question(1000, 200, 8)
    results = []
    for profile in (imported, catalog.model(model)):
        spec = DeploymentSpec.model_validate({"hardware": "nvidia-h200", "model": profile.model_dump(), "chips": 8})
        d = deploy(catalog, spec, question)
        results.append(estimate(d, 1000, 200, 8))
    assert results[0].ttft_s == pytest.approx(results[1].ttft_s, rel=1e-12)
    assert results[0].itl_s == pytest.approx(results[1].itl_s, rel=1e-12)


@pytest.mark.skipif(REFERENCE is None, reason="shared/reference/models.csv not present")
def test_params_within_two_percent_of_the_reference_table() -> None:
    def key(repo: str) -> str:  # the table names instruct checkpoints and R1 for the V3 architecture
        return repo.split("/")[-1].lower().split("-instruct")[0].replace("deepseek-r1", "deepseek-v3")

    with REFERENCE.open() as handle:
        published = {key(r["hf_repo"]): float(r["params_total_b"].lstrip("~")) * 1e9 for r in csv.DictReader(handle)}
    checked = 0
    for model in MODELS:
        repo = key(Catalog().model(model).hf_repo)
        if repo in published:
            assert total_params(profile_from_config(CONFIGS / model / "config.json")) == pytest.approx(
                published[repo], rel=0.02
            )
            checked += 1
    assert checked >= 5


def test_models_import_writes_a_profile_the_catalog_reads(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["models", "import", str(CONFIGS / "mixtral-8x7b" / "config.json"), "--name", "my-mixtral",
                 "-o", str(out)]) == 0  # fmt: skip
    assert "46.70 B parameters" in capsys.readouterr().out
    loaded = Catalog(model_dir=out).model("my-mixtral")
    assert yaml.safe_load((out / "my-mixtral.yaml").read_text())["moe"]["num_routed_experts"] == 8
    assert total_params(loaded) == pytest.approx(46.7e9, rel=0.01)


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"model_type": "mamba", "hidden_size": 4096}, "model_type: 'mamba' is not an architecture"),
        ({"model_type": "llama", "hidden_size": 4096}, "num_hidden_layers: missing"),
        ({"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
          "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64}, "n_routed_experts: missing"),
    ],
)  # fmt: skip
def test_unreadable_config_exits_2_naming_the_key(config, words, tmp_path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "out"
    assert main(["models", "import", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert words in err and str(path) in err and err.count("\n") == 1
    assert not out.exists()
