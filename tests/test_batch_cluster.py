"""`minutia batch` on a two-node Ray cluster started on loopback (issue 20): the driver joins it by address,
Ray places the workers on both nodes, and the deployment YAML the docs point at passes Ray's own schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app.batch.jobs import find_jobs
from app.platform.config import load_settings

ROOT = Path(__file__).resolve().parent.parent
ray = pytest.importorskip("ray")


def test_the_cluster_yaml_passes_rays_schema():
    import jsonschema

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((ROOT / "configs" / "deploy" / "ray-cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    assert config["provider"]["type"] == "local"
    starts = " ".join(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert "--port=6380" in starts and ":6380" in starts  # Ray's GCS off 6379, the Redis store's port
    broken = {**config, "provider": {"head_ip": "10.0.0.10"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_batch_workers_are_placed_on_both_nodes(tmp_path):
    import ray.cloudpickle
    from ray.cluster_utils import Cluster

    from app.batch.cluster import BatchOptions, run_batch
    import batch_parts
    from batch_parts import DiesOnceWorker, _silence

    ray.cloudpickle.register_pickle_by_value(batch_parts)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": 96 * 1024 * 1024})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=96 * 1024 * 1024)
        cluster.wait_for_nodes()
        inputs = [_silence(tmp_path / "in" / f"m{i}.wav", 0.5) for i in range(4)]
        report = run_batch(find_jobs(inputs), load_settings(None, {"home": str(tmp_path / "home")}),
                           BatchOptions(tmp_path / "out", ray_address=cluster.address, retries=0),
                           worker_cls=DiesOnceWorker)
        data = report.to_dict()
        assert data["done"] == 4 and data["workers"] == 2  # the cluster's 2 CPUs, one worker each
        assert len({job["node"] for job in data["jobs"]}) == 2
        assert not ray.is_initialized()  # the driver left the cluster it joined; the cluster still runs
        assert len(cluster.list_all_nodes()) == 2
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
