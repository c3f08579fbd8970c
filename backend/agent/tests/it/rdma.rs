//! RDMA devices for work that holds a whole node, with real agents and
//! real workloads on a simulated node with two stand-in RDMA devices
//! (character devices under the agent's state directory, as simulated
//! GPUs have): a job holding both of the node's GPUs sees the devices'
//! nodes under `/dev/infiniband` and NCCL is told their names; a job
//! holding one of the two GPUs sees neither, since the node's ports (and
//! their partition keys) cannot be split between tenants.

use crate::lab;
use crate::node;
use crate::support;

use node::Node;
use reqwest::StatusCode;
use serde_json::json;
use support::Engine;

mod sqlite {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_a_whole_node_gets_its_rdma_devices_in_a_sandbox() {
        super::only_a_whole_node_gets_its_rdma_devices(super::Engine::Sqlite, "sandbox").await;
    }
}

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_a_whole_node_gets_its_rdma_devices_in_a_container() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::only_a_whole_node_gets_its_rdma_devices(super::Engine::Postgres, "oci").await;
    }
}

/// What each job prints: the device nodes it sees and what NCCL is told.
const LOOK: &str = "echo devices=$(ls /dev/infiniband 2>/dev/null | tr '\\n' ' ') \
                    hca=${NCCL_IB_HCA:-none}; \
                    if test -c /dev/infiniband/uverbs0; then \
                    echo opened=$(head -c0 /dev/infiniband/uverbs0 && echo yes); fi";

async fn only_a_whole_node_gets_its_rdma_devices(engine: Engine, runtime: &str) {
    let node = Node::new(engine).await;
    let half = node
        .server
        .post(
            "/api/v1/admin/catalog/instance-types",
            &node.operator,
            json!({ "name": "h100x1", "gpu_model": "H100-SXM-80GB", "gpus_per_node": 1, "vcpus": 1, "memory_gib": 1 }),
        )
        .await;
    half.expect(StatusCode::CREATED);
    node.server
        .post(
            &format!(
                "/api/v1/admin/catalog/instance-types/{}/prices",
                half.id("/id")
            ),
            &node.operator,
            json!({ "pricing_class": "on_demand", "hourly_micros": 2_500_000 }),
        )
        .await
        .expect(StatusCode::CREATED);
    let mut command = lab::agent_command_simulating(
        &node.server,
        &node.token,
        "gpu-box-1",
        &node.state(),
        runtime,
        100,
        "2xH100-SXM-80GB",
    );
    command.args(["--simulate-rdma", "2"]);
    let _agent = node.spawn(command);
    node.ready().await;
    let tenant = node.server.signup("rdma").await;

    let mut seen = Vec::new();
    for instance_type in ["h100x1", "h100x2"] {
        let order = node
            .server
            .order(
                &tenant,
                json!({ "instance_type": instance_type, "job": { "command": LOOK } }),
            )
            .await;
        let ended = node
            .until(&tenant, order, "its end", |o| o["ended_at"].is_string())
            .await;
        assert_eq!(
            ended["status"],
            "completed",
            "{ended}\n{:?}",
            node.output(&tenant, order).await
        );
        seen.push(node.output(&tenant, order).await.join("\n"));
    }
    assert!(
        seen[0].contains("devices= hca=none") && !seen[0].contains("opened="),
        "a job on half the node got RDMA devices: {}",
        seen[0]
    );
    assert!(
        seen[1].contains("devices=rdma_cm uverbs0 uverbs1 hca=sim_ib0,sim_ib1")
            && seen[1].contains("opened=yes"),
        "a job on the whole node did not get its RDMA devices: {}\nagents: {}",
        seen[1],
        node.agent_log()
    );
}
