"""Where a speculative draft runs: beside the target (sharing its memory) or on chips of its own
(costing its own chips, leaving the target's KV untouched, its passes timed on its own chips)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from simulator.analytic.estimate import estimate
from simulator.analytic.layouts import Question, deploy
from simulator.analytic.placement import PlacementError
from simulator.analytic.step_time import StepCostModel
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.config.speculation import SpeculativeSpec
from simulator.plan.resolve import resolve
from simulator.studies.validation import BUNDLED_TABLE, predict_row, read_table, row_deployment
from tests.engine.conftest import scenario

CATALOG = Catalog()
QUESTION = Question(1000, 1000, 1)
DRAFT = {"draft": "model", "draft_model": "llama-3.1-8b", "tokens_proposed": 4}


def _deploy(fields: dict[str, Any]) -> Any:
    return deploy(CATALOG, DeploymentSpec.model_validate(fields), QUESTION)


@pytest.mark.parametrize(
    "target",
    [{"hardware": "cerebras-cs3", "model": "llama-3.1-70b", "weights": "bf16", "chips": 4},
     {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-70b", "weights": "fp8", "chips": 4}],
)  # fmt: skip
def test_a_draft_on_its_own_chips_leaves_the_target_kv_unchanged_and_costs_its_chips(target: dict[str, Any]) -> None:
    alone = _deploy(target)
    apart = _deploy(target | {"speculative": DRAFT | {"placement": "own-chips"}})
    assert apart.draft is not None and apart.draft_chips == apart.draft.chips >= 1
    assert (apart.kv_budget_bytes, apart.kv_bytes_per_token, apart.weight_bytes) == (
        alone.kv_budget_bytes, alone.kv_bytes_per_token, alone.weight_bytes)  # fmt: skip
    assert apart.max_sequences(2000) == alone.max_sequences(2000)
    assert apart.chips == alone.chips and apart.replica_chips == alone.chips + apart.draft.chips
    # the draft's own chips hold its weights and KV for every token the target's budget holds
    assert apart.draft.max_kv_tokens >= alone.max_kv_tokens


def test_a_draft_beside_the_target_takes_its_weights_and_kv_out_of_the_target_budget() -> None:
    target = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-70b", "weights": "fp8", "chips": 4}
    alone, beside = _deploy(target), _deploy(target | {"speculative": DRAFT})
    assert beside.draft is not None and beside.draft_chips == 0 and beside.replica_chips == beside.chips
    assert beside.kv_budget_bytes == pytest.approx(alone.kv_budget_bytes - beside.draft.weight_bytes, rel=1e-12)
    assert beside.kv_bytes_per_token == pytest.approx(alone.kv_bytes_per_token + beside.draft.kv_bytes_per_token)


def test_a_draft_on_its_own_chips_runs_its_passes_there() -> None:
    """The step's draft time is gamma passes of the draft deployment as placed (its chips, its layout)."""
    target = {"hardware": "cerebras-cs3", "model": "llama-3.1-70b", "weights": "bf16", "chips": 4}
    apart = _deploy(target | {"speculative": DRAFT | {"placement": "own-chips"}})
    assert apart.draft is not None and apart.draft.chips == apart.draft_chips
    cost = StepCostModel(apart)
    assert cost.draft is not None and cost.draft.deployment is apart.draft
    one_pass = cost.draft.pass_time([1.0], [1500.0]).total_s
    assert cost.draft_s(np.array([1500.0])) == pytest.approx(DRAFT["tokens_proposed"] * one_pass)
    result = estimate(apart, 1000, 1000, 1)
    assert result.per_user_output_tok_s is not None and result.per_user_output_tok_s > 0


def test_draft_chips_need_the_own_chips_placement() -> None:
    with pytest.raises(ValidationError, match="draft_chips"):
        SpeculativeSpec.model_validate(DRAFT | {"draft_chips": 1})
    too_few = DRAFT | {"placement": "own-chips", "draft_chips": 1}
    target = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-405b", "weights": "fp8", "chips": 8}
    with pytest.raises(PlacementError, match="draft on its own chips"):  # one chip cannot hold the 70B draft
        _deploy(target | {"speculative": too_few | {"draft_model": "llama-3.1-70b"}})


def test_every_speculative_row_of_the_bundled_table_is_predicted() -> None:
    rows = [r for r in read_table(BUNDLED_TABLE) if "speculative" in row_deployment(r, CATALOG)]
    assert rows, "the bundled table has speculative rows (M006, M035, M036)"
    for row in rows:
        result = predict_row(row, CATALOG)
        assert result.predicted is not None, f"{row.id}: {result.reason}"


def test_a_replica_pays_for_its_drafts_own_chips() -> None:
    """Cost per replica-hour (and the engine's energy and chip count) take the target's chips plus the draft's."""
    target = {"hardware": "cerebras-cs3", "model": "llama-3.1-70b", "weights": "bf16", "chips": 4}
    own = DRAFT | {"placement": "own-chips", "draft_chips": 2}
    apart = resolve(scenario(deployment=target | {"speculative": own}), CATALOG).backends[0]
    alone = resolve(scenario(deployment=target), CATALOG).backends[0]
    assert apart.deployment.replica_chips == 6 and alone.deployment.replica_chips == 4
    assert alone.usd_per_replica_hour > 0
    assert apart.usd_per_replica_hour == pytest.approx(alone.usd_per_replica_hour * 6 / 4, rel=1e-12)
