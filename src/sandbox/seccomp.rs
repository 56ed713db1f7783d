//! The seccomp-bpf programs every run's child installs on itself after `PR_SET_NO_NEW_PRIVS`
//! (`ptc_sandbox.confine`), compiled here with `seccompiler` for the architecture we run on.
//!
//! Every run has two programs: `base`, then the one of its kind, `run` for a Python run or
//! `exec` for a run that becomes a program (a bash run). `base` holds what neither a run nor
//! the fork server that makes runs needs: the fork server installs it on itself once, and every
//! process it forks inherits it (a cold child installs both). The kernel JIT-compiles each
//! program a process installs and computes its action cache by running the program for every
//! syscall number: `base` is most of the rules, and a run installing all of them cost 0.3 ms
//! of CPU; the program of its kind alone costs it about 0.05 ms. Each program holds, in order:
//! - (x86_64 only) the x32 ABI numbers, which would bypass rules written for x86_64: EPERM;
//! - `clone3`: ENOSYS, so glibc falls back to `clone`, whose flags a filter can read (clone3
//!   passes them behind a pointer);
//! - `base`: what no run needs and an attacker wants, EPERM: tracing and reading other
//!   processes, mounts other than `mount(2)`, keyrings, BPF, io_uring (which would bypass
//!   seccomp), modules; TCP Fast Open sends (they connect without `connect`, past Landlock's
//!   port rule); terminal injection; resource limits, priorities, CPU affinity, scheduling
//!   and I/O priority of any process but the caller (`prlimit64`, `setpriority`,
//!   `sched_set*`, `ioprio_set` only with pid/who 0: they need only the same uid, and would
//!   let one run starve or kill another); `memfd_create` and `execveat` (running what a run
//!   wrote without a file on a noexec mount); changing a file's mode, owner, times or extended
//!   attributes by path (Landlock does not cover metadata), and through a descriptor too
//!   unless the run's uid owns nothing but its own files ([`Options::own_uid`]);
//! - `run` and `exec`: what the fork server does to make a run and the run must not, EPERM:
//!   namespaces (`unshare`, `setns`, and `clone` with any `CLONE_NEW*` flag), `mount`,
//!   sockets other than TCP streams, `socketpair` other than an AF_UNIX stream pair, `listen`,
//!   undoing our prctls;
//! - `run` only, unless `PTC_ALLOW_SUBPROCESS`: process creation, EPERM for fork, vfork,
//!   clone without CLONE_THREAD, execve. Threads still start.
//! - `alone` (a run that becomes a program that may not start processes: a JavaScript run),
//!   unless `PTC_ALLOW_SUBPROCESS`: `exec`'s rules and process creation as for `run`, but for
//!   execve, which the child needs once to become its program (installed before it, a filter
//!   cannot tell that exec from a later one). A later exec only replaces the run's one
//!   process, inside every layer; node has no call that makes one in any case.
//!
//! A syscall is allowed only when every program a process has allows it (the kernel takes the
//! strictest answer). The guards are hand-written instructions put in front of what
//! `seccompiler` compiled from the rules (it matches exact numbers, with one action per
//! program), in every program.
//!
//! Owns the syscall lists; must not install anything in the sidecar itself.

use super::{SandboxError, Unavailable};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

/// One compiled program: `bpf` is the raw `struct sock_filter` array, native byte order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub name: &'static str,
    pub bpf: Vec<u8>,
}

/// The architecture this binary runs on, as `seccompiler` and `os.uname().machine` name it.
pub fn native_arch() -> Result<(TargetArch, &'static str), SandboxError> {
    let name = std::env::consts::ARCH;
    match name {
        "x86_64" => Ok((TargetArch::x86_64, "x86_64")),
        "aarch64" => Ok((TargetArch::aarch64, "aarch64")),
        other => Err(SandboxError::Seccomp(format!(
            "no syscall table for {other}"
        ))),
    }
}

/// Whether this kernel takes seccomp filters (and a container profile lets us ask).
pub fn available() -> Result<(), Unavailable> {
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 we own; it installs nothing.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    Err(Unavailable(match err.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) => {
            "the kernel has no seccomp filters (CONFIG_SECCOMP_FILTER)".to_string()
        }
        Some(libc::EPERM) => "blocked by a seccomp profile (allow the seccomp syscall)".into(),
        _ => format!("seccomp(SECCOMP_GET_ACTION_AVAIL): {err}"),
    }))
}

/// The program under every run, installed once by the fork server on itself.
pub const BASE_PROGRAM: &str = "base";
/// The program of a Python run (process creation refused unless `allow_subprocess`).
pub const RUN_PROGRAM: &str = "run";
/// The program of a run that becomes a program (a bash run): it may start processes, all of
/// them inside its sandbox and killed with it.
pub const EXEC_PROGRAM: &str = "exec";
/// The program of a run that becomes a program that may not start processes (a JavaScript
/// run without `PTC_ALLOW_SUBPROCESS`): `exec`'s rules, and `run`'s against process creation
/// but for execve (the child's exec of its program).
pub const ALONE_PROGRAM: &str = "alone";

/// What the programs allow beyond the rules every run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// `PTC_ALLOW_SUBPROCESS`: a Python run may start processes.
    pub allow_subprocess: bool,
    /// A run's uid owns nothing but the run's own files (it is not the uid of the sidecar,
    /// which owns the runtime dir, the SDK and the session root), so the kernel's ownership
    /// rules keep a metadata change through a descriptor on the run's own files: `fchmod`,
    /// `fchown`, `futimens`, `fsetxattr`, `fremovexattr` are allowed. Without it they are
    /// refused, as the path forms always are.
    pub own_uid: bool,
}

/// The four programs, `base`, `run`, `exec` and `alone`, for this architecture: a run has
/// `base` and one of the other three.
pub fn programs(options: Options) -> Result<Vec<Program>, SandboxError> {
    let (arch, _) = native_arch()?;
    let exec = run_rules()?;
    let mut run = exec.clone();
    let mut alone = exec.clone();
    if !options.allow_subprocess {
        let process = process_rules()?;
        let mut spawning = process.clone();
        spawning.remove(&libc::SYS_execve);
        refuse_too(&mut run, process);
        refuse_too(&mut alone, spawning);
    }
    Ok(vec![
        compile(BASE_PROGRAM, base_rules(options)?, arch)?,
        compile(RUN_PROGRAM, run, arch)?,
        compile(EXEC_PROGRAM, exec, arch)?,
        compile(ALONE_PROGRAM, alone, arch)?,
    ])
}

/// `rules` refuses what `more` refuses too.
fn refuse_too(rules: &mut Rules, more: Rules) {
    for (nr, more) in more {
        match rules.entry(nr) {
            Entry::Vacant(v) => {
                v.insert(more);
            }
            // No rule is a refusal whatever the arguments, which either side keeps;
            // else either side's rules refuse it, as two programs of one action would.
            Entry::Occupied(mut o) => match o.get().is_empty() || more.is_empty() {
                true => o.get_mut().clear(),
                false => o.get_mut().extend(more),
            },
        }
    }
}

/// The filter file the children read: `{"arch": "x86_64", "filters": [{"name", "bpf": hex}]}`.
/// Written once at startup; `ptc_sandbox.load_filters` checks the arch before using it.
pub fn filters_json(options: Options) -> Result<String, SandboxError> {
    let (_, arch) = native_arch()?;
    let filters: Vec<_> = programs(options)?
        .into_iter()
        .map(|p| serde_json::json!({"name": p.name, "bpf": crate::util::hex(&p.bpf)}))
        .collect();
    Ok(serde_json::json!({"arch": arch, "filters": filters}).to_string())
}

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// `rules` refused with EPERM (everything else allowed), behind the x32 and clone3 guards.
fn compile(name: &'static str, rules: Rules, arch: TargetArch) -> Result<Program, SandboxError> {
    let err = |e: seccompiler::BackendError| SandboxError::Seccomp(format!("{name}: {e}"));
    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, eperm, arch).map_err(err)?;
    let bpf: BpfProgram = filter.try_into().map_err(err)?;
    Ok(Program {
        name,
        bpf: to_bytes(&guarded(bpf, arch)?),
    })
}

/// `bpf` as `seccompiler` compiles it (the arch checked, then the syscall number loaded at
/// instruction 3, then the rules) with the guards put right after that load, where the
/// number is in the accumulator: x32 numbers refused (x86_64), clone3 answered ENOSYS. The
/// rules' jumps are relative and all within them, so moving them down changes none.
fn guarded(
    bpf: Vec<seccompiler::sock_filter>,
    arch: TargetArch,
) -> Result<Vec<seccompiler::sock_filter>, SandboxError> {
    const LOAD_NR: usize = 3;
    let ins = |code: u16, jt: u8, jf: u8, k: u32| seccompiler::sock_filter { code, jt, jf, k };
    let loads_nr = bpf
        .get(LOAD_NR)
        .is_some_and(|i| i.code == LD_W_ABS && i.k == 0);
    // Nothing before the load may jump past it.
    let jumps_past = bpf[..LOAD_NR.min(bpf.len())]
        .iter()
        .enumerate()
        .any(|(at, i)| {
            let reach = match i.code {
                JA => i.k as usize,
                c if c & 0x07 == 0x05 => usize::from(i.jt.max(i.jf)),
                _ => return false,
            };
            at + 1 + reach > LOAD_NR
        });
    if !loads_nr || jumps_past {
        return Err(SandboxError::Seccomp(
            "seccompiler's program does not load the syscall number where expected".into(),
        ));
    }
    let mut guards = Vec::new();
    if arch == TargetArch::x86_64 {
        guards.push(ins(JGE_K, 0, 1, X32_SYSCALL_BIT));
        guards.push(ins(RET_K, 0, 0, errno(libc::EPERM)));
    }
    guards.push(ins(JEQ_K, 0, 1, libc::SYS_clone3 as u32));
    guards.push(ins(RET_K, 0, 0, errno(libc::ENOSYS)));
    let mut out = bpf;
    out.splice(LOAD_NR + 1..LOAD_NR + 1, guards);
    Ok(out)
}

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JA: u16 = 0x05; // BPF_JMP | BPF_JA
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// x86_64: syscall numbers with bit 30 set are the x32 ABI, which shares the x86_64 audit
/// arch; none of the rules (exact x86_64 numbers) would match them.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn errno(code: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | code as u32
}

fn to_bytes(bpf: &[seccompiler::sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bpf.len() * 8);
    for ins in bpf {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jt);
        out.push(ins.jf);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| SandboxError::Seccomp(e.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conditions).map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// Syscalls `base` refuses whatever their arguments.
fn always_denied() -> Vec<i64> {
    let mut list = vec![
        // Other processes: read or write their memory, trace them, steal their fds.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_kcmp,
        libc::SYS_migrate_pages,
        libc::SYS_move_pages,
        // Mounts: the way out of every other layer (unshare, setns and mount, which the fork
        // server uses to make a run, are refused by `run_rules`).
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_quotactl,
        libc::SYS_quotactl_fd,
        // Kernel attack surface no run needs.
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_fanotify_init,
        // io_uring performs its operations outside any syscall filter.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // The machine itself.
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_syslog,
        libc::SYS_vhangup,
        libc::SYS_personality,
        // Executes a descriptor (a memfd the run wrote) where no noexec mount can stop it;
        // nothing a run starts needs it (glibc's fexecve is its only user).
        libc::SYS_execveat,
        // A file on no mount: executable by default (vm.memfd_noexec 0), reachable through
        // /proc/self/fd past Landlock, mappable executable by the dynamic loader. A run has no
        // use for one that its scratch directory does not serve.
        libc::SYS_memfd_create,
        libc::SYS_memfd_secret,
    ];
    #[cfg(target_arch = "x86_64")]
    list.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_uselib,
        libc::SYS_ustat,
        libc::SYS_sysfs,
        libc::SYS__sysctl,
        libc::SYS_lookup_dcookie,
    ]);
    list
}

/// `base`: what neither a run nor the fork server needs.
fn base_rules(options: Options) -> Result<Rules, SandboxError> {
    let mut rules: Rules = always_denied().into_iter().map(|nr| (nr, vec![])).collect();
    other_process_rules(&mut rules)?;
    io_rules(&mut rules)?;
    metadata_rules(&mut rules, options.own_uid)?;
    Ok(rules)
}

/// `setxattrat` and `removexattrat` (Linux 6.13), the same number on both architectures we
/// build for; not in the `libc` crate yet. A kernel without them answers ENOSYS anyway.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// Changing a file's mode, owner, times or extended attributes. Landlock does not cover
/// metadata: by path, a run could `chmod 000` any file it can name and its uid owns (another
/// run's scratch folder, a session's folder, the SDK of an unprivileged sidecar), or set a
/// session folder's times. The path forms are refused always. The descriptor forms need a
/// descriptor, which only an `open` that Landlock allowed gives; they are allowed only when
/// the run's uid owns nothing but its own files (`own_uid`), so that the kernel's ownership
/// rules refuse the read-only files it can open (the SDK, the interpreter). Reading metadata
/// (`stat`, `getxattr`) stays allowed.
fn metadata_rules(rules: &mut Rules, own_uid: bool) -> Result<(), SandboxError> {
    let mut by_path = vec![
        libc::SYS_fchmodat,
        libc::SYS_fchmodat2,
        libc::SYS_fchownat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
    ];
    #[cfg(target_arch = "x86_64")]
    by_path.extend([
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    for nr in by_path {
        rules.insert(nr, vec![]);
    }
    if own_uid {
        // utimensat(dirfd, path, times, flags) with a path; a null path is futimens(dirfd).
        rules.insert(
            libc::SYS_utimensat,
            vec![rule(vec![cond(1, Len::Qword, Op::Ne, 0)?])?],
        );
    } else {
        for nr in [
            libc::SYS_utimensat,
            libc::SYS_fchmod,
            libc::SYS_fchown,
            libc::SYS_fsetxattr,
            libc::SYS_fremovexattr,
        ] {
            rules.insert(nr, vec![]);
        }
    }
    Ok(())
}

/// What the fork server does to make a run, and the run must not: namespaces, `mount`, other
/// sockets, our prctls (the rules of `exec`, and of `run` with the process rules).
fn run_rules() -> Result<Rules, SandboxError> {
    // listen: a run only connects (its end of the bridge is listening before it is confined,
    // or is the fork server's); a socket listening in a network namespace later runs reuse
    // would wait for them.
    let mut rules: Rules = [
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_listen,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    socket_rules(&mut rules)?;
    self_rules(&mut rules)?;
    Ok(rules)
}

/// The stream socket types a rule lists (a rule can only AND `!=`, so no mask): SOCK_STREAM
/// with or without SOCK_NONBLOCK and SOCK_CLOEXEC, as `!=` conditions on argument `arg`.
fn not_a_stream(arg: u8) -> Result<Vec<SeccompCondition>, SandboxError> {
    let stream = libc::SOCK_STREAM as u64;
    let (nonblock, cloexec) = (libc::SOCK_NONBLOCK as u64, libc::SOCK_CLOEXEC as u64);
    [
        stream,
        stream | nonblock,
        stream | cloexec,
        stream | nonblock | cloexec,
    ]
    .into_iter()
    .map(|ty| cond(arg, Len::Dword, Op::Ne, ty))
    .collect()
}

/// Sockets: TCP streams, AF_UNIX stream pairs, no Fast Open.
fn socket_rules(rules: &mut Rules) -> Result<(), SandboxError> {
    // socket(domain, type, protocol): only TCP over IPv4/IPv6. Refused when the domain is
    // neither, when the type is not SOCK_STREAM (with or without SOCK_NONBLOCK/SOCK_CLOEXEC:
    // four values, listed rather than masked since a rule can only AND `!=`), or when the
    // protocol is not 0/TCP (SCTP and MPTCP streams are not TCP to Landlock).
    let socket = vec![
        rule(vec![
            cond(0, Len::Dword, Op::Ne, libc::AF_INET as u64)?,
            cond(0, Len::Dword, Op::Ne, libc::AF_INET6 as u64)?,
        ])?,
        rule(not_a_stream(1)?)?,
        rule(vec![
            cond(2, Len::Dword, Op::Ne, 0)?,
            cond(2, Len::Dword, Op::Ne, libc::IPPROTO_TCP as u64)?,
        ])?,
    ];
    rules.insert(libc::SYS_socket, socket);
    // socketpair: an AF_UNIX stream pair only (asyncio's self-pipe), which connects to
    // nothing; a datagram pair's end can send to any pathname datagram socket (/dev/log,
    // journald, NOTIFY_SOCKET) with sendto.
    rules.insert(
        libc::SYS_socketpair,
        vec![
            rule(vec![cond(0, Len::Dword, Op::Ne, libc::AF_UNIX as u64)?])?,
            rule(not_a_stream(1)?)?,
        ],
    );
    Ok(())
}

/// Other processes' limits, priorities and scheduling.
fn other_process_rules(rules: &mut Rules) -> Result<(), SandboxError> {
    // Other processes' limits, priorities and scheduling need only the same uid: one run
    // could set another's (or the fork server's) RLIMIT_NPROC to 0. Only the caller's own.
    let not_self = |arg: u8| -> Result<SeccompRule, SandboxError> {
        rule(vec![cond(arg, Len::Dword, Op::Ne, 0)?])
    };
    for nr in [
        libc::SYS_prlimit64,
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setattr,
        libc::SYS_sched_setparam,
    ] {
        rules.insert(nr, vec![not_self(0)?]);
    }
    // setpriority(which, who, prio): PRIO_PROCESS of the caller only (PRIO_USER with who 0
    // is every process of the caller's uid, other runs included).
    rules.insert(
        libc::SYS_setpriority,
        vec![
            rule(vec![cond(
                0,
                Len::Dword,
                Op::Ne,
                libc::PRIO_PROCESS as u64,
            )?])?,
            not_self(1)?,
        ],
    );
    // ioprio_set(which, who, ioprio): IOPRIO_WHO_PROCESS of the caller only.
    const IOPRIO_WHO_PROCESS: u64 = 1;
    rules.insert(
        libc::SYS_ioprio_set,
        vec![
            rule(vec![cond(0, Len::Dword, Op::Ne, IOPRIO_WHO_PROCESS)?])?,
            not_self(1)?,
        ],
    );
    Ok(())
}

/// What a run could do to its own confinement: namespaces by clone, our prctls.
fn self_rules(rules: &mut Rules) -> Result<(), SandboxError> {
    // clone with a CLONE_NEW* flag makes namespaces as unshare does (the flags are clone's
    // first argument on both architectures we build for; clone3 is ENOSYS).
    let mut new_namespace = Vec::new();
    for flag in [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ] {
        let flag = flag as u64;
        new_namespace.push(rule(vec![cond(0, Len::Qword, Op::MaskedEq(flag), flag)?])?);
    }
    rules.insert(libc::SYS_clone, new_namespace);
    // prctl: keep what confine() set (not dumpable, die with the fork server) and let no
    // process declare itself a tracer.
    let mut prctl = Vec::new();
    for option in [
        libc::PR_SET_DUMPABLE as u64,
        libc::PR_SET_PDEATHSIG as u64,
        libc::PR_SET_PTRACER as u64,
    ] {
        prctl.push(rule(vec![cond(0, Len::Dword, Op::Eq, option)?])?);
    }
    rules.insert(libc::SYS_prctl, prctl);
    Ok(())
}

/// Connections without `connect` and terminal injection.
fn io_rules(rules: &mut Rules) -> Result<(), SandboxError> {
    // TCP Fast Open: sendto/sendmsg with MSG_FASTOPEN connects without connect(2).
    let fastopen = libc::MSG_FASTOPEN as u64;
    for (nr, flags_arg) in [
        (libc::SYS_sendto, 3),
        (libc::SYS_sendmsg, 2),
        (libc::SYS_sendmmsg, 3),
    ] {
        rules.insert(
            nr,
            vec![rule(vec![cond(
                flags_arg,
                Len::Dword,
                Op::MaskedEq(fastopen),
                fastopen,
            )?])?],
        );
    }
    // ioctl: no typing into a terminal we might share (TIOCSTI) or console tricks (TIOCLINUX).
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCSTI)?])?,
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCLINUX)?])?,
        ],
    );
    Ok(())
}

fn process_rules() -> Result<Rules, SandboxError> {
    let mut rules: Rules = BTreeMap::new();
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_fork, vec![]);
        rules.insert(libc::SYS_vfork, vec![]);
    }
    rules.insert(libc::SYS_execve, vec![]);
    // clone's flags are its first argument on both architectures we build for.
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(
            0,
            Len::Qword,
            Op::MaskedEq(libc::CLONE_THREAD as u64),
            0,
        )?])?],
    );
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `bpf` answers for syscall `nr` with arguments `args` on this machine's arch: a
    /// classic-BPF evaluator of the instructions our programs use.
    fn verdict(bpf: &[u8], nr: u32, args: [u64; 6]) -> u32 {
        let arch: u32 = match native_arch().unwrap().0 {
            TargetArch::x86_64 => 62 | 0x8000_0000 | 0x4000_0000,
            _ => 183 | 0x8000_0000 | 0x4000_0000,
        };
        let word = |off: u32| -> u32 {
            match off {
                0 => nr,
                4 => arch,
                o if (16..64).contains(&o) => {
                    let arg = args[((o - 16) / 8) as usize];
                    if (o - 16) % 8 == 0 {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                o => panic!("a load at {o}"),
            }
        };
        let ins: Vec<(u16, u8, u8, u32)> = bpf
            .chunks(8)
            .map(|c| {
                let code = u16::from_ne_bytes([c[0], c[1]]);
                (
                    code,
                    c[2],
                    c[3],
                    u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let (code, jt, jf, k) = ins[pc];
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { jt } else { jf });
            match code {
                LD_W_ABS => a = word(k),
                RET_K => return k,
                JA => pc += k as usize,
                JEQ_K => pc += jump(a == k),
                JGE_K => pc += jump(a >= k),
                0x25 => pc += jump(a > k),
                0x45 => pc += jump(a & k != 0),
                0x54 => a &= k,
                other => panic!("instruction {other:#x} at {}", pc - 1),
            }
        }
    }

    fn program(allow_subprocess: bool, name: &str) -> Vec<u8> {
        let options = Options {
            allow_subprocess,
            own_uid: false,
        };
        let all = programs(options).unwrap();
        all.into_iter().find(|p| p.name == name).unwrap().bpf
    }

    /// What a process with `installed` (oldest first) is answered, as the kernel decides: the
    /// strictest action, the newest program's among equals.
    fn answer(installed: &[&[u8]], nr: u32, args: [u64; 6]) -> u32 {
        let action = |ret: u32| (ret & libc::SECCOMP_RET_ACTION_FULL) as i32;
        let mut out = ALLOW;
        for bpf in installed.iter().rev() {
            let ret = verdict(bpf, nr, args);
            if action(ret) < action(out) {
                out = ret;
            }
        }
        out
    }

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

    #[test]
    fn one_program_per_kind_of_run_within_the_kernels_bound() {
        for (allow_subprocess, own_uid) in [(false, false), (true, false), (false, true)] {
            let all = programs(Options {
                allow_subprocess,
                own_uid,
            })
            .unwrap();
            let names: Vec<_> = all.iter().map(|p| p.name).collect();
            assert_eq!(
                names,
                [BASE_PROGRAM, RUN_PROGRAM, EXEC_PROGRAM, ALONE_PROGRAM]
            );
            for p in &all {
                assert!(p.bpf.len() % 8 == 0 && !p.bpf.is_empty(), "{}", p.name);
                assert!(p.bpf.len() / 8 <= 4096, "{}", p.name);
            }
        }
    }

    /// A run's two programs together (`base` and the one of its kind) answer as the rules say,
    /// guards included.
    #[test]
    fn each_kind_of_run_is_answered_as_the_rules_say() {
        let base = program(false, BASE_PROGRAM);
        let run: &[&[u8]] = &[&base, &program(false, RUN_PROGRAM)];
        let exec: &[&[u8]] = &[&base, &program(false, EXEC_PROGRAM)];
        let run_allowing: &[&[u8]] = &[&program(true, BASE_PROGRAM), &program(true, RUN_PROGRAM)];
        let alone: &[&[u8]] = &[&base, &program(false, ALONE_PROGRAM)];
        let alone_allowing: &[&[u8]] =
            &[&program(true, BASE_PROGRAM), &program(true, ALONE_PROGRAM)];
        let none = [0; 6];
        let eperm = errno(libc::EPERM);
        let verdict = answer;
        for bpf in [run, exec, run_allowing, alone, alone_allowing] {
            assert_eq!(verdict(bpf, libc::SYS_getpid as u32, none), ALLOW);
            assert_eq!(verdict(bpf, libc::SYS_read as u32, none), ALLOW);
            assert_eq!(
                verdict(bpf, libc::SYS_clone3 as u32, none),
                errno(libc::ENOSYS)
            );
            for nr in [
                libc::SYS_unshare,
                libc::SYS_setns,
                libc::SYS_mount,
                libc::SYS_bpf,
                libc::SYS_ptrace,
                libc::SYS_io_uring_setup,
                libc::SYS_memfd_create,
            ] {
                assert_eq!(verdict(bpf, nr as u32, none), eperm, "{nr}");
            }
            let other = [1, libc::RLIMIT_NPROC as u64, 0, 0, 0, 0];
            assert_eq!(verdict(bpf, libc::SYS_prlimit64 as u32, other), eperm);
            let own = [0, libc::RLIMIT_NPROC as u64, 0, 0, 0, 0];
            assert_eq!(verdict(bpf, libc::SYS_prlimit64 as u32, own), ALLOW);
            let pdeathsig = [libc::PR_SET_PDEATHSIG as u64, 0, 0, 0, 0, 0];
            assert_eq!(verdict(bpf, libc::SYS_prctl as u32, pdeathsig), eperm);
            let seqpacket = [
                libc::AF_UNIX as u64,
                libc::SOCK_SEQPACKET as u64,
                0,
                0,
                0,
                0,
            ];
            assert_eq!(verdict(bpf, libc::SYS_socketpair as u32, seqpacket), eperm);
            let netns = [
                libc::CLONE_NEWNET as u64 | libc::SIGCHLD as u64,
                0,
                0,
                0,
                0,
                0,
            ];
            assert_eq!(verdict(bpf, libc::SYS_clone as u32, netns), eperm);
            let thread = [
                libc::CLONE_THREAD as u64 | libc::CLONE_VM as u64,
                0,
                0,
                0,
                0,
                0,
            ];
            assert_eq!(verdict(bpf, libc::SYS_clone as u32, thread), ALLOW);
            let udp = [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
            assert_eq!(verdict(bpf, libc::SYS_socket as u32, udp), eperm);
            let tcp = [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
            assert_eq!(verdict(bpf, libc::SYS_socket as u32, tcp), ALLOW);
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                verdict(bpf, X32_SYSCALL_BIT | libc::SYS_getpid as u32, none),
                eperm
            );
        }
        // Process creation: refused to a Python run only, unless allowed.
        let fork = [libc::SIGCHLD as u64, 0, 0, 0, 0, 0];
        assert_eq!(verdict(run, libc::SYS_clone as u32, fork), eperm);
        assert_eq!(verdict(run, libc::SYS_execve as u32, none), eperm);
        assert_eq!(verdict(exec, libc::SYS_clone as u32, fork), ALLOW);
        assert_eq!(verdict(exec, libc::SYS_execve as u32, none), ALLOW);
        assert_eq!(verdict(run_allowing, libc::SYS_clone as u32, fork), ALLOW);
        assert_eq!(verdict(run_allowing, libc::SYS_execve as u32, none), ALLOW);
        // A JavaScript run: its program's exec, and no process of its own unless allowed.
        assert_eq!(verdict(alone, libc::SYS_execve as u32, none), ALLOW);
        assert_eq!(verdict(alone, libc::SYS_clone as u32, fork), eperm);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(verdict(alone, libc::SYS_vfork as u32, none), eperm);
        assert_eq!(verdict(alone_allowing, libc::SYS_clone as u32, fork), ALLOW);
        assert_eq!(verdict(alone, libc::SYS_execveat as u32, none), eperm);
        // Refused to both whatever the arguments.
        assert_eq!(verdict(exec, libc::SYS_execveat as u32, none), eperm);
        assert_eq!(verdict(run, libc::SYS_execveat as u32, none), eperm);
    }

    /// `base` alone, the fork server's, lets it make runs (clone into namespaces, setns,
    /// mount, its sockets, the death signal) and refuses it the rest as it refuses runs.
    #[test]
    fn the_fork_servers_program_lets_it_make_runs() {
        let base = program(false, BASE_PROGRAM);
        let none = [0; 6];
        let eperm = errno(libc::EPERM);
        let isolated = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS;
        let clone = [(isolated | libc::SIGCHLD) as u64, 0, 0, 0, 0, 0];
        assert_eq!(verdict(&base, libc::SYS_clone as u32, clone), ALLOW);
        let net = [libc::CLONE_NEWNET as u64, 0, 0, 0, 0, 0];
        assert_eq!(verdict(&base, libc::SYS_unshare as u32, net), ALLOW);
        assert_eq!(verdict(&base, libc::SYS_setns as u32, net), ALLOW);
        assert_eq!(verdict(&base, libc::SYS_mount as u32, none), ALLOW);
        let seqpacket = [
            libc::AF_UNIX as u64,
            libc::SOCK_SEQPACKET as u64,
            0,
            0,
            0,
            0,
        ];
        assert_eq!(
            verdict(&base, libc::SYS_socketpair as u32, seqpacket),
            ALLOW
        );
        let udp = [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
        assert_eq!(verdict(&base, libc::SYS_socket as u32, udp), ALLOW);
        let pdeathsig = [libc::PR_SET_PDEATHSIG as u64, 9, 0, 0, 0, 0];
        assert_eq!(verdict(&base, libc::SYS_prctl as u32, pdeathsig), ALLOW);
        for nr in [
            libc::SYS_bpf,
            libc::SYS_ptrace,
            libc::SYS_umount2,
            libc::SYS_keyctl,
        ] {
            assert_eq!(verdict(&base, nr as u32, none), eperm, "{nr}");
        }
        assert_eq!(
            verdict(&base, libc::SYS_clone3 as u32, none),
            errno(libc::ENOSYS)
        );
    }

    /// Metadata changes: by path always refused (Landlock does not cover them), through a
    /// descriptor only where the run's uid owns nothing but its own files; reading allowed.
    #[test]
    fn metadata_is_changed_only_through_a_descriptor_of_a_runs_own_uid() {
        let eperm = errno(libc::EPERM);
        let shared = program(false, BASE_PROGRAM);
        let own = programs(Options {
            allow_subprocess: false,
            own_uid: true,
        })
        .unwrap()
        .into_iter()
        .find(|p| p.name == BASE_PROGRAM)
        .unwrap()
        .bpf;
        let path = [libc::AT_FDCWD as u64, 0x7fff_0000, 0, 0, 0, 0];
        let mut by_path = vec![
            libc::SYS_fchmodat,
            libc::SYS_fchmodat2,
            libc::SYS_fchownat,
            libc::SYS_utimensat,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            SYS_SETXATTRAT,
            SYS_REMOVEXATTRAT,
        ];
        #[cfg(target_arch = "x86_64")]
        by_path.extend([
            libc::SYS_chmod,
            libc::SYS_chown,
            libc::SYS_lchown,
            libc::SYS_utime,
            libc::SYS_utimes,
            libc::SYS_futimesat,
        ]);
        for bpf in [&shared, &own] {
            for &nr in &by_path {
                assert_eq!(verdict(bpf, nr as u32, path), eperm, "{nr}");
            }
            for nr in [libc::SYS_newfstatat, libc::SYS_statx, libc::SYS_getxattr] {
                assert_eq!(verdict(bpf, nr as u32, path), ALLOW, "{nr}");
            }
        }
        // futimens is utimensat with a null path.
        let fd = [3, 0, 0, 0, 0, 0];
        for nr in [
            libc::SYS_fchmod,
            libc::SYS_fchown,
            libc::SYS_utimensat,
            libc::SYS_fsetxattr,
            libc::SYS_fremovexattr,
        ] {
            assert_eq!(verdict(&shared, nr as u32, fd), eperm, "{nr}");
            assert_eq!(verdict(&own, nr as u32, fd), ALLOW, "{nr}");
        }
    }

    /// A run connects and never listens; the fork server listens for its runs.
    #[test]
    fn a_run_may_not_listen() {
        let base = program(false, BASE_PROGRAM);
        let none = [3, 128, 0, 0, 0, 0];
        let eperm = errno(libc::EPERM);
        for kind in [RUN_PROGRAM, EXEC_PROGRAM, ALONE_PROGRAM] {
            let installed: &[&[u8]] = &[&base, &program(false, kind)];
            assert_eq!(answer(installed, libc::SYS_listen as u32, none), eperm);
            let connect = libc::SYS_connect as u32;
            assert_eq!(answer(installed, connect, none), ALLOW);
        }
        assert_eq!(verdict(&base, libc::SYS_listen as u32, none), ALLOW);
    }

    #[test]
    fn the_filter_file_names_its_arch() {
        let json: serde_json::Value =
            serde_json::from_str(&filters_json(Options::default()).unwrap()).unwrap();
        assert_eq!(json["arch"], std::env::consts::ARCH);
        assert!(json["filters"][0]["bpf"].as_str().unwrap().len() >= 16);
    }
}
