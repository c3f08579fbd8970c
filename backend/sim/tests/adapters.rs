//! The trace adapters read slices of the real files (see fixtures/README.md)
//! and name the line of anything malformed.

use gantry_scheduler::GpuRequest;
use gantry_sim::{alibaba, csv, swf};

const NODES: &str = include_str!("fixtures/nodes.csv");
const PODS: &str = include_str!("fixtures/pods_default.csv");
const MULTIGPU: &str = include_str!("fixtures/pods_multigpu20.csv");
const SWF: &str = include_str!("fixtures/lublin_256_head.swf");

#[test]
fn alibaba_nodes_and_pods_are_read() {
    let nodes = alibaba::nodes(NODES).expect("node list");
    assert_eq!(nodes.len(), 21);
    assert_eq!(nodes[0].name, "openb-node-0000");
    assert_eq!(
        (nodes[0].cpu_milli, nodes[0].memory_mib, nodes[0].gpus.len()),
        (64_000, 262_144, 2)
    );
    assert_eq!(nodes[0].gpus[0].model, "P100");

    let pods = alibaba::pods(PODS).expect("pod list");
    assert_eq!(pods.len(), 120);
    assert_eq!(pods[1].name, "openb-pod-0001");
    assert_eq!(
        (
            pods[1].num_gpu,
            pods[1].gpu_milli,
            pods[1].gpu_request_milli()
        ),
        (1, 460, 460)
    );
    let models = vec!["G2".to_owned(), "T4".to_owned()];
    let workload = pods[1].workload("w".into(), &models);
    assert_eq!(workload.gpus, GpuRequest::Milli(460));
    assert_eq!(workload.gpu_models, models, "no spec: any model");
    assert!(
        pods.iter().any(|p| p.num_gpu == 0),
        "CPU-only pods are kept"
    );

    let short = alibaba::pods(MULTIGPU).expect("five-column list");
    assert_eq!(short.len(), 30);
    assert!(short.iter().all(|p| p.gpu_spec.is_empty()));
}

#[test]
fn malformed_alibaba_lines_name_their_line() {
    let broken = format!("{}\nopenb-node-9,lots,1024,8,G2\n", NODES.trim_end());
    let error = alibaba::nodes(&broken).expect_err("bad cpu");
    assert_eq!(error.line, 23);
    assert!(error.to_string().starts_with("line 23: cpu_milli"));
    let error = alibaba::pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,2,500\n")
        .expect_err("shared multi-GPU pod");
    assert_eq!(error.line, 2);
    assert!(alibaba::pods("name,cpu\n").is_err(), "wrong header");
    assert!(alibaba::nodes("").is_err(), "empty file");
}

#[test]
fn swf_jobs_are_read_and_bad_lines_rejected() {
    let jobs = swf::jobs(SWF).expect("swf");
    assert_eq!(jobs.len(), 40);
    assert_eq!(
        (jobs[0].id, jobs[0].submit, jobs[0].run, jobs[0].processors),
        (1, 5_094, 12_072, 16)
    );
    assert_eq!(jobs[0].requested_time, None);
    let replay = swf::replay_jobs(&jobs);
    assert_eq!(replay[0].workload.node_count, 16);
    assert_eq!(replay[0].workload.duration_estimate, Some(12_072));
    let error = swf::jobs("; comment\n1 2 3\n").expect_err("short line");
    assert_eq!(error.line, 2);
    let error =
        swf::jobs("1 x -1 5 1 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n").expect_err("bad submit");
    assert!(error.to_string().contains("submit time"));
}

#[test]
fn gantry_csv_formats_are_read() {
    let cluster = csv::cluster(&format!(
        "{}\nn1,eu-west-1,r1,64000,262144,8,H100,eu-gdpr;fast\n",
        csv::CLUSTER_HEADER
    ))
    .expect("cluster");
    assert_eq!(cluster[0].gpus.len(), 8);
    assert!(cluster[0].labels.contains("fast"));
    let jobs = csv::workloads(&format!(
        "{}\nj1,team-a,10,3600,8,1000,2,H100|H200,8000,65536,production,training\nj2,team-b,20,60,1,500,1,H100,1000,1024,,dev\n",
        csv::WORKLOAD_HEADER
    ))
    .expect("workloads");
    assert_eq!(jobs[0].workload.gpus, GpuRequest::Whole(8));
    assert_eq!(jobs[0].workload.node_count, 2);
    assert_eq!(jobs[1].workload.gpus, GpuRequest::Milli(500));
    let error = csv::workloads(&format!(
        "{}\nj1,q,0,10,2,500,1,H100,0,0,,\n",
        csv::WORKLOAD_HEADER
    ))
    .expect_err("shared two-GPU job");
    assert_eq!(error.line, 2);
    let error = csv::workloads(&format!(
        "{}\nj1,q,0,10,1,1000,1,H100,0,0,urgent,\n",
        csv::WORKLOAD_HEADER
    ))
    .expect_err("unknown priority");
    assert!(error.to_string().contains("unknown priority"));
}
