# Lifetime: a chain of processes that outlives everything unless the kernel ends it. The run
# starts a member in a session of its own (`setsid`), which starts the next, three deep; the
# bottom re-forks itself forever (a new process every 50 ms, its parent gone at once), so a
# killer that ends one generation at a time never catches up. One member tries `prlimit`
# RLIMIT_NOFILE 0 on its parent, on the run's first process and on the fork server (the pid the
# harness sees it by): a fork server with no descriptors dies, and every run it forked with it.
# Each must be refused (seccomp: prlimit on the caller only; the fork server has no pid in the
# run's PID namespace). Then the run waits at a checkpoint, where the harness sees the chain,
# and ends (ARG_then=end), or parks as a victim (ARG_then=park) while the harness stops the
# sidecar. Either way, no process of the chain may exist afterwards.

chain="chain-$ARG_mark.sh"
cat > "$chain" <<'CHAIN'
# chain-MARK.sh DEPTH: one member of the chain, in a session of its own.
depth=$1
if [ "$depth" -eq 0 ]; then
    sleep 0.05
    setsid bash "$0" 0 </dev/null >/dev/null 2>&1 &
    exit 0
fi
setsid bash "$0" $((depth - 1)) </dev/null &
if [ "$depth" -eq 2 ]; then
    refusal="Operation not permitted|No such process"
    attempt "prlimit RLIMIT_NOFILE 0 on its parent (pid $PPID in the run)" "$refusal" \
        prlimit --pid "$PPID" --nofile=0:0
    attempt "prlimit RLIMIT_NOFILE 0 on the run's first process (pid 1 in the run)" "$refusal" \
        prlimit --pid 1 --nofile=0:0
    attempt "prlimit RLIMIT_NOFILE 0 on the fork server ($ARG_fork_server_pid)" "$refusal" \
        prlimit --pid "$ARG_fork_server_pid" --nofile=0:0
    touch attempted
fi
while :; do sleep 1; done
CHAIN

export -f attempt say
export ARG_fork_server_pid
setsid bash "$chain" 3 </dev/null &
for _ in $(seq 100); do
    [ -e attempted ] && break
    sleep 0.05
done
# A few generations of the bottom.
sleep 0.3
checkpoint
if [ "$ARG_then" = park ]; then
    checkpoint victim
    sleep 60
fi
