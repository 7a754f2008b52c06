"""Where a campaign's evaluations run: this machine's worker pool (`agentloop.evaluation.pool`), or
evaluation actors on a Ray cluster (`agentloop.evaluation.cluster.ray_pool`, `pip install
'agentloop[ray]'`), chosen by the campaign's `cluster: {ray: ADDRESS}` or `agentloop run --ray ADDRESS`."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from agentloop.campaign.file import Campaign, CampaignError

OFF = "off"
"""`--ray off`: the local worker pool, whatever the campaign file says."""


def ray_address(campaign: Campaign, override: str | None = None) -> str | None:
    """The Ray cluster a run evaluates on (`--ray` before the campaign's `cluster`), or None for
    the local worker pool."""
    address = override or (campaign.cluster.ray if campaign.cluster else None)
    return None if address in (None, "", OFF) else address


def evaluation_pool(campaign: Campaign, override: str | None = None) -> Callable[..., Any]:
    """A factory of the run's evaluation pool, called as `factory(device, workers)`; checked
    before anything runs: CampaignError (one line) when Ray is wanted and not installed."""
    from agentloop.evaluation.pool import WorkerPool

    address = ray_address(campaign, override)
    if address is None:
        return WorkerPool
    if importlib.util.find_spec("ray") is None:
        raise CampaignError("the Ray back-end (--ray, or cluster: in the campaign) needs Ray: "
                            "pip install 'agentloop[ray]', or run without it (--ray off)")
    options = campaign.cluster.model_dump(exclude={"ray"}) if campaign.cluster else {}

    def factory(device: str, workers: int | None = None) -> Any:
        from agentloop.evaluation.cluster.ray_pool import ClusterError, RayPool

        try:
            return RayPool(device, address, **options)
        except ClusterError as exc:
            raise CampaignError(str(exc)) from None

    return factory
