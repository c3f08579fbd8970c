#!/usr/bin/env bash
# A real Slurm 22.05 cluster for the Slurm driver's tests, from Debian's
# packages: one slurmctld, slurmdbd keeping accounting in MariaDB, and one
# slurmd per emulated GPU node, each on its own port of this host, with
# GPUs as GRES over device files that stand for them.
#
#   test-slurm.sh start DIR NODES GPUS_PER_NODE GRES_TYPE   prints SLURM_CONF
#   test-slurm.sh stop DIR
#
# The daemons run as root and authenticate every request with MUNGE (a
# munged of the cluster's own, with its own key and socket), so a tenant's
# job cannot claim to be another user, as on a real cluster. They listen on
# ports chosen free at start. Nodes are named DIR's cluster name plus 001,
# 002, ...
set -euo pipefail

what=${1:?start or stop}
dir=$(realpath -m "${2:?a directory for the cluster}")

stop() {
  local pids=()
  for f in "$dir"/pids/*.pid; do
    [ -e "$f" ] && pids+=("$(cat "$f")")
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 50); do
      alive=0
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && break
      sleep 0.1
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
  # Jobs' steps and their processes outlive a killed slurmd: they carry
  # the cluster's configuration in their environment or its directory in
  # their command line.
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = $$ ] && continue
    if grep -qsF "SLURM_CONF=$dir/etc/slurm.conf" "$p/environ" || grep -qsF "$dir/" "$p/cmdline"; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  if [ -e "$dir/database" ]; then
    local database
    database=$(cat "$dir/database")
    mysql -uroot -h127.0.0.1 -e "DROP DATABASE IF EXISTS $database" || true
  fi
  rm -f "$dir"/pids/*.pid
}

if [ "$what" = stop ]; then
  stop
  exit 0
fi

nodes=${3:?number of nodes}
gpus=${4:?GPUs per node}
gres=${5:?GRES type}
name=c$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
stop
rm -rf "$dir"
mkdir -p "$dir"/{etc,state,log,pids,fakedev,bin,out,munge}
# Jobs' users read the configuration and reach the MUNGE socket.
chmod 755 "$dir" "$dir/etc" "$dir/munge"
# The daemons take their role from their own name: Debian's files end in
# -wlm, and under that name slurmctld drops the GRES of slurm.conf.
ln -s /usr/sbin/slurmctld-wlm "$dir/bin/slurmctld"
ln -s /usr/sbin/slurmd-wlm "$dir/bin/slurmd"
ln -s /usr/sbin/slurmstepd-wlm "$dir/bin/slurmstepd"
ln -s /usr/sbin/slurmdbd "$dir/bin/slurmdbd"
# slurmd accepts a GPU only as a device file.
for ((g = 0; g < gpus; g++)); do ln -s /dev/null "$dir/fakedev/gpu$g"; done

# Ports nobody listens on: slurmctld, slurmdbd, then one per node.
free_base() {
  local taken
  taken=$(ss -Htan | awk '{print $4}' | sed 's/.*://' | sort -u)
  while true; do
    local base=$((20000 + RANDOM % 30000)) clash=0
    for ((p = base; p <= base + nodes + 2; p++)); do
      grep -qx "$p" <<<"$taken" && clash=1 && break
    done
    [ $clash = 0 ] && echo "$base" && return
  done
}
base=$(free_base)
ctld_port=$base
dbd_port=$((base + 1))
first_node_port=$((base + 2))
last=$(printf '%03d' "$nodes")
node_names="${name}n[001-$last]"
node_ports="[$first_node_port-$((first_node_port + nodes - 1))]"
if [ "$nodes" = 1 ]; then
  node_names="${name}n001"
  node_ports=$first_node_port
fi
database="slurm_$name"
echo "$database" >"$dir/database"

mungekey --create --keyfile="$dir/munge/munge.key"
chmod 600 "$dir/munge/munge.key"
# --force: munged refuses root unless told; its socket is the cluster's own.
munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --log-file="$dir/log/munged.log" --pid-file="$dir/pids/munged.pid" \
  --seed-file="$dir/munge/munged.seed" </dev/null >/dev/null 2>&1
auth_info="socket=$dir/munge/munge.socket"

cat >"$dir/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=$auth_info
DbdHost=localhost
DbdPort=$dbd_port
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=root
StorageLoc=$database
PidFile=$dir/pids/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
EOF
chmod 600 "$dir/etc/slurmdbd.conf"

cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=$name
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
AuthType=auth/munge
AuthInfo=$auth_info
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/state/%n
SlurmctldPidFile=$dir/pids/slurmctld.pid
SlurmdPidFile=$dir/pids/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$dbd_port
AccountingStorageTRES=gres/gpu
# The connection to slurmdbd takes its MUNGE socket from here.
AccountingStoragePass=$dir/munge/munge.socket
MailProg=/bin/true
# Users see their own jobs only, as on a cluster shared by tenants.
PrivateData=jobs,usage,users,accounts
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_continue,default_queue_depth=1000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=300
SlurmdTimeout=300
InactiveLimit=0
MinJobAge=300
KillWait=5
OverTimeLimit=0
Waittime=0
NodeName=$node_names NodeAddr=127.0.0.1 NodeHostname=localhost Port=$node_ports CPUs=128 Boards=1 SocketsPerBoard=2 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=2000000 Gres=gpu:$gres:$gpus State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$dir/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=$node_names Name=gpu Type=$gres File=$dir/fakedev/gpu[0-$((gpus - 1))]
EOF
# This host mounts cgroup v1 on a tmpfs, where detection fails.
printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$dir/etc/cgroup.conf"

export SLURM_CONF=$dir/etc/slurm.conf
# The daemons must not hold the caller's pipes open: its reader would wait
# for them.
# slurmdbd reads slurmdbd.conf beside $SLURM_CONF.
"$dir/bin/slurmdbd" </dev/null >/dev/null 2>&1
for _ in $(seq 1 150); do
  sacctmgr -n list cluster >/dev/null 2>&1 && break
  sleep 0.2
done
sacctmgr -i add cluster "$name" >/dev/null
sacctmgr -i add account gantry Description=gantry Organization=gantry >/dev/null
sacctmgr -i add user root Account=gantry >/dev/null
"$dir/bin/slurmctld" -f "$SLURM_CONF" </dev/null >/dev/null 2>&1
for _ in $(seq 1 150); do
  scontrol ping 2>/dev/null | grep -q 'is UP' && break
  sleep 0.2
done
scontrol ping 2>/dev/null | grep -q 'is UP' || {
  echo "slurmctld did not come up: $dir/log/slurmctld.log" >&2
  tail -5 "$dir/log/slurmctld.log" >&2
  exit 1
}
for ((i = 1; i <= nodes; i++)); do
  "$dir/bin/slurmd" -f "$SLURM_CONF" -N "$(printf '%sn%03d' "$name" "$i")" -d "$dir/bin/slurmstepd" </dev/null >/dev/null 2>&1
done
for _ in $(seq 1 300); do
  [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | wc -l)" -ge "$nodes" ] && break
  sleep 0.2
done
[ "$(sinfo -h -N -t idle -o '%N' | wc -l)" -ge "$nodes" ] || {
  echo "the nodes did not come up: $dir/log" >&2
  exit 1
}
echo "$SLURM_CONF"
