//! Which CPUs each workload runs on: as many as its instance type has
//! vCPUs, the least used first, so `nproc` and `os.sched_getaffinity`
//! inside say the type's size and two workloads share a CPU only when the
//! node has too few for them all.

use std::collections::HashMap;

/// The CPUs the agent may run on (its affinity), in order.
pub fn available() -> Vec<u32> {
    // SAFETY: sched_getaffinity(2) fills the set on this stack; CPU_ISSET
    // reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE)
            .filter(|cpu| libc::CPU_ISSET(*cpu as usize, &set))
            .filter_map(|cpu| u32::try_from(cpu).ok())
            .collect()
    }
}

/// `count` CPUs of `available`, those fewest workloads hold first (in
/// number order among equals).
pub fn choose(count: usize, available: &[u32], held: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut load: HashMap<u32, usize> = available.iter().map(|c| (*c, 0)).collect();
    for cpu in held {
        if let Some(n) = load.get_mut(&cpu) {
            *n += 1;
        }
    }
    let mut order: Vec<u32> = available.to_vec();
    order.sort_by_key(|cpu| (load[cpu], *cpu));
    order.truncate(count.clamp(1, available.len().max(1)));
    order.sort_unstable();
    order
}

/// The kernel's list form: `0,1,5`.
pub fn list(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_held_cpus_are_chosen() {
        let all = [0, 1, 2, 3];
        assert_eq!(choose(2, &all, [].into_iter()), vec![0, 1]);
        assert_eq!(choose(2, &all, [0, 1].into_iter()), vec![2, 3]);
        assert_eq!(choose(3, &all, [0, 1, 2, 3, 0].into_iter()), vec![1, 2, 3]);
        // More than the node has: all of them.
        assert_eq!(choose(8, &all, [].into_iter()), vec![0, 1, 2, 3]);
        assert_eq!(list(&[0, 1, 5]), "0,1,5");
    }
}
