# Runs INSIDE every sandbox as pid 1 of its pid namespace (bwrap --as-pid-1), from /.rs/supervisor.py.
# That position is the point: the program cannot SIGKILL/SIGSTOP it (the kernel drops signals to a
# namespace init that has no handler), every orphan is reparented to it, and when it exits the kernel
# kills whatever is left. Per command it forks a fresh child (python code runs in that already-started
# interpreter, so a warm request costs a fork, not an interpreter start), applies the request's rlimits,
# enforces the wall clock, kills every leftover process when the command ends, and reports exit status
# and CPU time.
#
# Control protocol with the host: fd 3 (host -> sandbox) and fd 4 (sandbox -> host) carry frames of a
# 4-byte big-endian length + a list of fields, each a 4-byte length + bytes (see ../control-frames.ts).
# Only C modules are imported (no json, enum, ctypes wrapper, traceback): each sandbox start pays for
# it, and start cost is what bounds one-shot throughput. Program output goes straight to fds 1/2 (host
# pipes); after a command the supervisor appends an unguessable end marker to both, created after every
# process of the command is dead, so the host knows exactly where this command's output ends.
#
# Reuse (the fork server): a pool sandbox serves many one-shot commands, one at a time. A "once" command
# is a "run" followed by a reset, before its report: every process of it is dead (kill(-1) + reap to
# ECHILD), /workspace, /tmp and /dev/shm are emptied (and their mode, times and xattrs restored), SysV IPC
# objects are removed, the shared stdout/stderr pipes get back their flags and size, and this process's
# own state that a program of the same uid can change from outside (rlimits via prlimit, nice, CPU
# affinity, scheduler, I/O priority) is compared with what it was at start. The report says whether
# the reset left the sandbox exactly as it started ("clean"); if not, the host retires the sandbox.
# The next interpreter is forked only after the reset, so no process of the next command exists while
# a command runs, and each command is a fresh fork of this (never program-touched) interpreter: module
# monkey-patches, globals, environment variables and cwd changes die with the command's process.
#
# argv: [1] node binary ("" when node is not available), [2] runtime to prestart ("python"/"node"/""),
# [3] the CPUs this sandbox runs on ("0,1,5"; "" for all), applied before anything is forked,
# [4] "reuse" when it serves more than one command (more modules are preloaded: PRELOAD_REUSED).
import os, sys, select, resource, fcntl, atexit, gc, _signal, _struct, _ctypes, time

CTL_IN, CTL_OUT = 3, 4
NODE = sys.argv[1] if len(sys.argv) > 1 else ""
PRESTART = sys.argv[2] if len(sys.argv) > 2 else ""
CPUS = sys.argv[3] if len(sys.argv) > 3 else ""
REUSED = len(sys.argv) > 4 and sys.argv[4] == "reuse"
BOOT_JS = "/.rs/boot.js"
FORK_LOOP_SO = "/.rs/forkserver.so"
# Fresh namespaces per execution (isolation.ts: freshNamespaces): the tmpfs folders each execution gets
# and its seccomp filter. Out of the environment before any program can read it.
FRESH_MOUNTS = os.environ.pop("RS_FRESH_MOUNTS", "")
EXEC_FILTER = bytes.fromhex(os.environ.pop("RS_EXEC_SECCOMP", ""))
# Per-execution uids (isolation.ts: perExecutionUid): "first:count" of this user namespace's uids, each
# mapped to a host uid of its own; forkserver.c switches each execution's process to the next one.
EXEC_IDS = os.environ.pop("RS_EXEC_IDS", "")
# In a sandbox that serves many commands the C loop moves the interpreter's code onto huge pages (huge-text.h)
# once it has forked this many python executions, and the node fork server once it has forked this many node
# ones: the copy costs about an execution, and an idle session never holds one.
HUGE_TEXT_AFTER = 8
# In a sandbox that serves many commands pid 1 pins the pages a python execution writes (pin_hot_pages), then
# loads SEAL_FILTER on itself (io_uring_setup and io_uring_register refused from then on, to it and to all it
# forks) before it says ready; it refuses to start when it cannot. Why: sandbox/README.md, "io_uring at a
# sandbox's start".
SEAL_FILTER = bytes.fromhex(os.environ.pop("RS_SEAL_SECCOMP", ""))
ISOLATE = None  # the C loop's rs_fs_isolate, when fresh namespaces are on
LOOP = None  # the C loop (load_fork_loop)
SESSION = False  # this sandbox serves a session: its commands share one set of namespaces and files
CLK_TCK = os.sysconf("SC_CLK_TCK")
U32 = _struct.Struct(">I")
ModuleType = type(sys)
_prctl = _ctypes.dlsym(_ctypes.dlopen(None), "prctl")
PR_SET_DUMPABLE, PR_SET_NAME = 4, 15
SIGNAMES = {}
for _k, _v in sorted(vars(_signal).items()):
    if _k.startswith("SIG") and not _k.startswith("SIG_") and isinstance(_v, int):
        SIGNAMES.setdefault(_v, _k)
SIGNAMES.update({_signal.SIGABRT: "SIGABRT", _signal.SIGIO: "SIGIO", _signal.SIGCHLD: "SIGCHLD"})

def prctl(option, arg):
    return _ctypes.call_function(_prctl, (option, arg, 0, 0, 0))

with open("/proc/self/comm", "w") as _f:
    _f.write("rs-supervisor")
# Not dumpable: the program runs under the same uid, and must not open /proc/1/fd/4 or /proc/1/mem.
prctl(PR_SET_DUMPABLE, 0)

wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
_signal.set_wakeup_fd(wake_w)
_signal.signal(_signal.SIGCHLD, lambda s, f: None)
# Python handles SIGINT (KeyboardInterrupt); a handled signal reaches even a namespace init, so a program
# could stop us with it. SIG_DFL makes the kernel drop it like every other signal sent to us from inside.
_signal.signal(_signal.SIGINT, _signal.SIG_DFL)
for _fd in (CTL_IN, CTL_OUT):
    os.set_inheritable(_fd, False)

exited = {}
site_loaded = False
# The __main__ that python children run their program in, built once in pid 1 (prepare_main).
prepared_main = None

def write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]

# Exercises the compiler and the common statement kinds once, in pid 1 (see load_site). Runs nothing.
WARM_UP_PROGRAM = """
def _warm(xs, *args, **kw):
    try:
        for i, x in enumerate(xs):
            if x is None or not isinstance(x, (int, float)):
                continue
            yield f"{i}:{x!r}", [y * 2 for y in range(i)], {k: v for k, v in kw.items()}, lambda z: z + 1
    except (ValueError, KeyError) as e:
        raise RuntimeError(str(e)) from e
    finally:
        pass
class _Warm:
    def __init__(self, n: int = 0) -> None:
        self.n = n
"""
# Modules most programs import, loaded once here so that each forked command finds them imported.
# Only when python is served: a node or bash sandbox does not pay for them.
PRELOAD = ("json", "re", "math", "collections", "itertools", "functools", "heapq", "bisect", "operator", "struct")
# In a sandbox that serves many commands (argv[4] "reuse": maxExecsPerSandbox > 1, the default), also
# these: an import a child does itself costs copy-on-write faults even for a small module (string), and
# the traceback of a program that raises more (its modules, then their lazy set-up: see warm_tracebacks);
# preloaded, nearly nothing. The price: a little time and memory at the sandbox's start, paid once for its
# many commands, and a few more faults in a command that uses none of them. Not random, statistics or queue:
# random re-seeds in every fork, queue brings threading, whose fork hooks cost every command many faults.
PRELOAD_REUSED = ("traceback", "linecache", "typing", "string", "copy", "array", "decimal", "fractions", "datetime")
WIPE_DIRS = (("/workspace", 0o700), ("/tmp", 0o1777), ("/dev/shm", 0o1777))
_libc = _ctypes.dlopen(None)
_syscall = _ctypes.dlsym(_libc, "syscall")
# ioprio_get/ioprio_set numbers (x86_64, aarch64); elsewhere I/O priority is not checked.
IOPRIO_GET = {"x86_64": 252, "aarch64": 30}.get(os.uname().machine)
F_SETPIPE_SZ, F_GETPIPE_SZ, F_SETOWN, F_SETSIG = 1031, 1032, 8, 10

RLIMITS = tuple((name, getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_"))

def own_state():
    """What a program of the same uid could change about this process from outside (inherited by the next command)."""
    st = {}
    for name, res in RLIMITS:
        st[name] = resource.getrlimit(res)
    st["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    st["affinity"] = sorted(os.sched_getaffinity(0))
    st["sched"] = os.sched_getscheduler(0)
    if IOPRIO_GET is not None:
        st["ioprio"] = _ctypes.call_function(_syscall, (IOPRIO_GET, 1, 0))
    return st

SOCKOPTS = ("SO_SNDBUF", "SO_RCVBUF", "SO_SNDTIMEO", "SO_RCVTIMEO", "SO_LINGER", "SO_PASSCRED", "SO_RCVLOWAT", "SO_PEEK_OFF")

def pipe_state(fd):
    # fds 1/2 are the host's pipes (node makes them unix socketpairs). The command shares their open file
    # descriptions with us, so flags and buffer options it sets there would reach the next command.
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        return (flags, fcntl.fcntl(fd, F_GETPIPE_SZ))
    except OSError:
        pass
    import _socket
    s = _socket.socket(fileno=os.dup(fd))
    try:
        opts = []
        for name in SOCKOPTS:
            opt = getattr(_socket, name, None)
            if opt is not None:
                opts.append(s.getsockopt(_socket.SOL_SOCKET, opt, 32 if name.endswith(("TIMEO", "LINGER")) else 0))
        return (flags, tuple(opts))
    finally:
        s.close()

def restore_pipe(fd, want):
    # Flags and async-signal ownership can be put back; anything else that differs retires the sandbox.
    fcntl.fcntl(fd, fcntl.F_SETFL, want[0])
    fcntl.fcntl(fd, F_SETOWN, 0)
    fcntl.fcntl(fd, F_SETSIG, 0)
    return pipe_state(fd) == want

def wipe_dir(dfd):
    # fd-relative, never following a symlink: the tree is the command's, made to trick us if it can
    # (every process of it is dead by now, so nothing changes under us).
    for entry in list(os.scandir(dfd)):
        name = entry.name
        if entry.is_dir(follow_symlinks=False):
            os.chmod(name, 0o700, dir_fd=dfd)
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            try:
                wipe_dir(sub)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)

def wipe():
    ok = True
    for path, mode in WIPE_DIRS:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            ok = False
            continue
        try:
            os.chmod(fd, 0o700)
            wipe_dir(fd)
            for attr in os.listxattr(fd):
                os.removexattr(fd, attr)
            os.chmod(fd, mode)
            os.utime(fd, (0, 0))
            ok = ok and not os.listdir(fd)
        except OSError:
            ok = False
        finally:
            os.close(fd)
    return ok

def remove_sysv_ipc():
    # SysV IPC objects outlive their creator; they live in this sandbox's ipc namespace, so /proc/sysvipc
    # lists exactly ours. (POSIX message queues cannot be listed without mounting mqueue: seccomp denies them.)
    ok = True
    for kind, fn in (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl")):
        try:
            with open("/proc/sysvipc/" + kind) as f:
                ids = [int(line.split()[1]) for line in f.read().splitlines()[1:] if line.strip()]
        except (OSError, ValueError, IndexError):
            ok = False
            continue
        ctl = _ctypes.dlsym(_libc, fn)
        for i in ids:
            args = (i, 0, 0, 0) if kind == "sem" else (i, 0, 0)  # IPC_RMID = 0, no buffer
            if _ctypes.call_function(ctl, args) != 0:
                ok = False
    return ok

def tcp_left():
    """TCP connections left in this sandbox's network namespace (forkserver.c: tcp_counts_zero says why they
    make a sandbox not clean): True, False, or None where the counts cannot be read."""
    try:
        total = 0
        for path, prefix in (("/proc/net/sockstat", "TCP:"), ("/proc/net/sockstat6", "TCP6:")):
            if prefix == "TCP6:" and not os.path.exists(path):
                continue  # no IPv6
            with open(path) as f:
                fields = next(line for line in f.read().splitlines() if line.startswith(prefix)).split()
            counts = dict(zip(fields[1::2], map(int, fields[2::2])))
            total += counts["inuse"] + counts.get("tw", 0)
        return total != 0
    except (OSError, StopIteration, KeyError, ValueError):
        return None

# Whether tcp_left could read the counts, and found none, when the supervisor started: else the check is off.
TCP_CHECK = False

def reset_after_command():
    """Everything a one-shot command could leave for the next one, undone; False if anything differs."""
    ok = wipe()
    ok = remove_sysv_ipc() and ok
    if TCP_CHECK:
        ok = tcp_left() is False and ok
    for fd in (1, 2):
        try:
            ok = restore_pipe(fd, BASE_PIPES[fd]) and ok
        except OSError:
            ok = False
    try:
        ok = own_state() == BASE_STATE and ok
    except OSError:
        ok = False
    return ok

def read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)

def read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)

def recv():
    hdr = read_exact(CTL_IN, 4)
    if hdr is None:
        return None
    body = read_exact(CTL_IN, U32.unpack(hdr)[0])
    if body is None:
        return None
    return split_fields(body)

def split_fields(body):
    fields, i = [], 0
    while i < len(body):
        n = U32.unpack_from(body, i)[0]
        fields.append(body[i + 4:i + 4 + n])
        i += 4 + n
    return fields

def send(*fields):
    parts = []
    for f in fields:
        b = f if isinstance(f, bytes) else str(f).encode()
        parts.append(U32.pack(len(b)))
        parts.append(b)
    body = b"".join(parts)
    write_all(CTL_OUT, U32.pack(len(body)) + body)

def reap(block=False):
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        exited[pid] = status

def kill_all(spare=None):
    # As namespace init, kill(-1) reaches every other process of this sandbox and never us; all of
    # them are our descendants (or were reparented to us), so reaping until ECHILD proves they are gone.
    if spare is not None:
        return kill_all_but(spare)
    while True:
        try:
            os.kill(-1, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not reap(block=True):
            return

def kill_all_but(spare):
    # With the node fork server alive, kill(-1) would take it too: kill every other process by pid until
    # none is left alive. A process being killed cannot finish a fork, so each pass leaves fewer; what a
    # pass missed (forked after the listing) the next one finds. Zombies are their parents' to reap: ours
    # (orphans) here, the server's child by the server, which reports it.
    for _ in range(100000):
        alive = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == 1 or pid == spare:
                continue
            try:
                with open("/proc/%d/stat" % pid, "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in (b"Z", b"X"):
                continue
            alive = True
            try:
                os.kill(pid, _signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reap()
        if not alive:
            return
        time.sleep(0.0002)

def place_fds(mapping):
    # Move sources out of the way first so that targets never clobber each other.
    high = {t: fcntl.fcntl(s, fcntl.F_DUPFD_CLOEXEC, 64) for t, s in mapping.items()}
    for t, h in high.items():
        os.dup2(h, t)
    top = max(mapping)
    for fd in range(3, top):
        if fd not in mapping:
            try:
                os.close(fd)
            except OSError:
                pass
    os.closerange(top + 1, 1 << 16)

def parse_rlimits(text):
    lim = {}
    for item in text.split():
        name, _, value = item.partition("=")
        soft, _, hard = value.partition(":")
        lim[name] = (int(soft), int(hard or soft))
    return lim

def apply_rlimits(lim, pid=0):
    for name, (soft, hard) in lim.items():
        res = getattr(resource, "RLIMIT_" + name.upper(), None)
        if res is None:
            continue
        # Never above what the sandbox already has: raising a hard limit needs a capability we dropped.
        cur_hard = (resource.prlimit(pid, res) if pid else resource.getrlimit(res))[1]
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
            soft = min(soft, hard)
        if pid:
            resource.prlimit(pid, res, (soft, hard))
        else:
            resource.setrlimit(res, (soft, hard))

def child_common(stdin_fd, extra=None, fresh=False, isolate=True):
    # A session of its own, so an autogroup of its own: the scheduler's weight for a session is writable by
    # its processes (/proc/self/autogroup), and in the sandbox's session a program's `nice 19` there would
    # outlive it and slow every later command of this sandbox (the next sample's tests, to a timeout).
    os.setsid()
    _signal.set_wakeup_fd(-1)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    # Isolated before the fds are placed: the template user namespace's fd is open until then (the C side
    # closes it); place_fds would close it first.
    if ISOLATE is not None and isolate:
        if ISOLATE(int(fresh)) != 0:
            os._exit(127)  # the C side said why, on stderr
    mapping = {0: stdin_fd, 1: 1, 2: 2}
    mapping.update(extra or {})
    place_fds(mapping)
    prctl(PR_SET_DUMPABLE, 1)

def exec_reset():
    # Python ignores SIGPIPE and SIGXFSZ; an exec'd program must get the default (die) behaviour.
    for s in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(s, _signal.SIG_DFL)

def load_site():
    # The supervisor runs with -S (fast start); programs still get the interpreter's site-packages.
    global site_loaded
    if not site_loaded:
        site_loaded = True
        try:
            import site
            site.main()
        except Exception:
            pass
        for name in PRELOAD + (PRELOAD_REUSED if REUSED else ()):
            try:
                __import__(name)
            except Exception:
                pass
        if REUSED:
            warm_tracebacks()
        # One compile here, before any fork: the first compile in a process grows shared tables (the
        # interned-string dict is resized, many pages rewritten). Done once here instead of in every
        # child, it takes a large share of a warm child's copy-on-write faults off each execution.
        exec(compile(WARM_UP_PROGRAM, "<warm-up>", "exec"), {"__name__": "<warm-up>"})
        global prepared_main
        prepared_main = prepare_main()
        freeze()

def warm_tracebacks():
    # A program that raises gets its traceback printed by the traceback module (run_python), whose first
    # use builds what it reads lazily. Done here once, for an exception and a syntax error, from source
    # held in linecache as run_python holds a program's; the cache is emptied again after.
    try:
        import linecache, traceback
        src = "def _f(x):\n    raise ValueError(x)\n_f(1)\n"
        linecache.cache["<warm-up>"] = (len(src), None, src.splitlines(True), "<warm-up>")
        for text in (src, "def _g(:\n"):
            try:
                exec(compile(text, "<warm-up>", "exec"), {})
            except BaseException as e:
                traceback.format_exception(type(e), e, e.__traceback__)
        linecache.clearcache()
    except Exception:
        pass

def freeze():
    # Every fork shares this process's pages copy-on-write, and a collection that walks the old objects
    # writes to each one's header: in the child (a page fault per page, the bulk of a warm start's cost)
    # and here. Frozen objects are never walked again; new ones are collected as usual.
    gc.collect()
    plug_allocator_holes()
    gc.freeze()

def allocator_free_blocks():
    """(block size, free blocks in partly used pools) per pymalloc size class, from sys._debugmallocstats,
    which writes to fd 2: read here through a pipe. [] without pymalloc or where the format differs."""
    r, w = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(w, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(w)
    text = read_all(r).decode("ascii", "replace")
    os.close(r)
    import re
    return [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"^\s*\d+\s+(\d+)\s+\d+\s+\d+\s+(\d+)\s*$", text, re.M)]

# Objects that fill the free blocks of pymalloc's partly used pools (plug_allocator_holes); never freed.
ALLOCATOR_PLUGS = []

def plug_allocator_holes():
    # After the imports and warm-ups, the small-object allocator's pools are full of freed blocks, scattered
    # over many pages. A child allocates from those first, so each object it makes lands on another page it
    # shares with this process: a copy-on-write fault each. Filled here, with objects of each size class
    # that live as long as this process, they leave a child's allocations to fresh pools, where they sit
    # side by side (fewer faults and less CPU a child: sandbox/test/allocator-plugs.test.ts). The free-block
    # counts come from sys._debugmallocstats (written
    # to fd 2: allocator_free_blocks); without pymalloc, or where its format differs, nothing is filled.
    try:
        rows = allocator_free_blocks()
        if not rows or rows[0][0] not in (8, 16):
            return
        align = rows[0][0]
        header = sys.getsizeof(b"")
        for size, free in rows:
            if size - header >= 2:
                make = lambda n=size - header: bytes(n)
            elif size - align < sys.getsizeof(object()) <= size:
                make = object
            elif size - align < sys.getsizeof(0.5) <= size:
                make = lambda: float(len(ALLOCATOR_PLUGS)) + 0.5
                free += 100  # floats come from their own free list first
            else:
                continue
            ALLOCATOR_PLUGS.extend(make() for _ in range(free))
    except Exception:
        pass

def exit_code_of(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1

def prepare_main():
    # What every python child needs and pid 1 can hold unharmed: argv, an empty __main__ (pid 1's own code
    # keeps its globals; nothing looks its module up by name), a line-buffered sys.stdout (pid 1 never
    # writes to it). Built once in pid 1 (load_site), before the freeze, it is not rebuilt (and its pages not
    # copied) in every child.
    sys.argv = ["-c"]
    main = ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except BaseException:
        pass
    return main

def prepare_python():
    # Everything but the program itself, so that a warm child does it before the request arrives.
    # sys.path[0] = "" (the program's folder) only here, in the child: pid 1 must never import from a
    # folder the program writes. The throwaway compile/exec matters: a fresh fork pays copy-on-write faults
    # and lazy set-up on its first compile; paid here, it is off the request's path. It is a call that
    # prints nothing, then both streams flushed (no bytes reach them: nothing was buffered): a call,
    # stdout's write path and the flushes at exit are what nearly every program takes, so their pages are
    # copied before the request, not in its time.
    main = prepared_main if prepared_main is not None else prepare_main()
    sys.path.insert(0, "")
    try:
        exec(compile('print(end="")', "<warm-up>", "exec"), {})
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    return main

def run_python(code, main=None):
    if main is None:
        main = prepare_python()
    rc = 0
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        rc = exit_code_of(e)
    except BaseException as e:
        rc = 1
        try:
            import linecache, traceback
            linecache.cache["<string>"] = (len(code), None, code.splitlines(True), "<string>")
            tb = e.__traceback__
            traceback.print_exception(type(e), e, tb.tb_next if tb is not None else None)
        except BaseException:
            try:
                print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
            except BaseException:
                pass
    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()
        except BaseException:
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    if SURVEY_REPORT is not None:
        SURVEY_REPORT()
    os._exit(rc)

def code_fd(code):
    fd = os.memfd_create("rs-program", 0)
    write_all(fd, code)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd

def child(lang, code, stdin_fd, lim, fresh=False, files=()):
    try:
        if lang == "python":
            child_common(stdin_fd, None, fresh)
            child_files(files)
            apply_rlimits(lim)
            run_python(code.decode("utf-8", "replace"))
        elif lang == "bash":
            big = len(code) > 100000
            fd = code_fd(code) if big else None
            child_common(stdin_fd, {3: fd} if big else None, fresh)
            child_files(files)
            apply_rlimits(lim)
            exec_reset()
            os.execv("/bin/bash", ["bash", "/proc/self/fd/3"] if big else ["bash", "-c", code])
        elif lang == "node":
            fd = code_fd(code)
            child_common(stdin_fd, {3: fd}, fresh)
            child_files(files)
            apply_rlimits(lim)
            exec_reset()
            os.execv(NODE, [NODE, BOOT_JS])
        else:
            print("rollstream sandbox: unknown language %r" % (lang,), file=sys.stderr)
    except BaseException as e:
        try:
            print("rollstream sandbox: could not start the program: %r" % (e,), file=sys.stderr)
        except BaseException:
            pass
    os._exit(127)

def child_files(files):
    # An execution with fresh namespaces writes its files itself, into its own /workspace.
    if not files:
        return
    try:
        write_files(files)
    except (OSError, ValueError) as e:
        print("rollstream sandbox: could not write files: %s" % (e,), file=sys.stderr)
        os._exit(126)

def proc_cpu_ms(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000.0 / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0

def release_program(pid, lim, code_w, code):
    """An interpreter started ahead (blocked reading its program from code_w's pipe) gets the request's rlimits,
    its CPU limit raised by the CPU it spent starting, then its program. Returns that start-up CPU (ms)."""
    startup = proc_cpu_ms(pid)
    if "cpu" in lim:
        extra = int(-(-startup // 1000))
        lim = dict(lim)
        lim["cpu"] = (lim["cpu"][0] + extra, lim["cpu"][1] + extra)
    apply_rlimits(lim, pid)
    write_all(code_w, code)
    return startup

class Warm:
    """A python interpreter the C loop forked ahead of the request (forkserver.c), blocked reading its program
    from fd 3, handed over with a frame the C loop does not serve."""
    def __init__(self, pid, code_w, in_w, fresh):
        self.lang, self.pid, self.code_w, self.in_w, self.fresh = "python", pid, code_w, in_w, fresh

    def launch(self, code, lim):
        startup = release_program(self.pid, lim, self.code_w, code)
        os.close(self.code_w)
        self.code_w = -1
        return self.pid, self.in_w, startup

    def discard(self):
        try:
            os.kill(self.pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        for fd in (self.code_w, self.in_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.code_w = self.in_w = -1
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        exited.pop(self.pid, None)

class Zygote:
    """The node fork server: one node started with the sandbox (boot.js --zygote, nodefork.c), which forks
    a child per node execution instead of a node being started for each. With fresh namespaces each child
    isolates itself before its program as the C loop's children do (exec-isolation.h): the server gets the C
    loop's settings and, with per-execution uids, keeps CAP_SETUID and CAP_SETGID to switch each child to the
    uid pid 1 hands it. The server itself never runs program code."""
    def __init__(self, pin=False):
        import _socket
        self._socket = _socket
        a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        null = os.open("/dev/null", os.O_RDONLY)
        pid = os.fork()
        if pid == 0:
            try:
                child_common(null, {3: b.fileno()}, isolate=False)
                exec_reset()
                env = dict(os.environ)
                if ISOLATE is not None:
                    env["RS_NF_MOUNTS"] = FRESH_MOUNTS
                    env["RS_NF_FILTER"] = EXEC_FILTER.hex()
                    if EXEC_IDS:
                        env["RS_NF_EXEC_UIDS"] = "1"  # each child unshares its own user namespace: no template
                        if LOOP["keep_setid_caps"]() != 0:
                            os._exit(126)
                if REUSED:
                    env["RS_NF_HUGE_TEXT_AFTER"] = str(HUGE_TEXT_AFTER)  # node's code onto huge pages (huge-text.h)
                if pin:
                    # Started before pid 1 seals itself (main): the server pins, then loads the same seal.
                    env["RS_NF_PIN"] = str(PIN_MAX_PAGES)
                    env["RS_NF_SEAL"] = SEAL_FILTER.hex()
                # --single-threaded: a forked child has no V8 worker threads, so V8 must never need them.
                os.execve(NODE, [NODE, "--single-threaded", BOOT_JS, "--zygote"], env)
            finally:
                os._exit(127)
        os.close(null)
        b.close()
        self.sock, self.pid = a, pid
        if self._recv(1) != b"r":
            self.discard()
            raise OSError("the node fork server failed to start")

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except InterruptedError:
                continue
            if not chunk:
                return None
            buf += chunk
        return buf

    def launch(self, code, lim, fresh):
        """Forks an execution blocked on its program; returns (pid, stdin writer, its start-up CPU ms)."""
        uid = LOOP["take_exec_id"]() if fresh and EXEC_IDS else 0
        in_r, in_w = os.pipe()
        code_r, code_w = os.pipe()
        for fd in (in_w, code_w):
            os.set_inheritable(fd, False)
        try:
            self.sock.sendmsg([b"x" + bytes((int(fresh),)) + _struct.pack("=I", uid)], [(self._socket.SOL_SOCKET, self._socket.SCM_RIGHTS, _struct.pack("ii", in_r, code_r))])
        except OSError:
            for fd in (in_r, in_w, code_r, code_w):
                os.close(fd)
            raise
        os.close(in_r)
        os.close(code_r)
        m = self._recv(5)
        pid = _struct.unpack("=i", m[1:])[0] if m is not None and m[:1] == b"p" else -1
        if pid <= 0:
            os.close(in_w)
            os.close(code_w)
            raise OSError("the node fork server could not fork")
        try:
            startup = release_program(pid, lim, code_w, code)
        except OSError:
            os.close(in_w)
            raise
        finally:
            os.close(code_w)
        return pid, in_w, startup

    def result(self):
        """The execution's wait status and CPU ms, once the server has reaped it; None if the server died."""
        m = self._recv(21)
        if m is None or m[:1] != b"s":
            return None
        status, ut, st = _struct.unpack("=iqq", m[1:])
        return status, (ut + st) / 1000.0

    def alive(self):
        return self.pid not in exited and self.sock is not None

    def discard(self):
        try:
            os.kill(self.pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        exited.pop(self.pid, None)

ZYGOTE = None  # the node fork server, once started
ZYGOTE_FAILED = False  # it could not start here: each node execution is a node started for it, without retrying

def zygote(pin=False):
    """The node fork server, started if need be (pin: it pins its hot pages and seals itself); None where it
    cannot serve."""
    global ZYGOTE, ZYGOTE_FAILED
    if ZYGOTE is not None and not ZYGOTE.alive():
        ZYGOTE.discard()
        ZYGOTE = None
    if ZYGOTE is None and not ZYGOTE_FAILED and NODE:
        try:
            ZYGOTE = Zygote(pin)
        except OSError as e:
            ZYGOTE_FAILED = True
            print("rollstream sandbox: could not start the node fork server: %s" % (e,), file=sys.stderr)
    return ZYGOTE

def write_files(pairs):
    for i in range(0, len(pairs) - 1, 2):
        rel = pairs[i].decode("utf-8", "replace")
        path = os.path.normpath(os.path.join("/workspace", rel))
        if not path.startswith("/workspace/"):
            raise ValueError("file path escapes the work dir: " + rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(pairs[i + 1])

def run_command(req, warm):
    # req: [b"run" | b"once", lang, code, stdin, wallMs, rlimits, next, path1, content1, ...]
    t0 = time.monotonic()
    lang = req[1].decode()
    code = req[2]
    lim = parse_rlimits(req[5].decode())
    deadline = t0 + int(req[4]) / 1000.0
    once = req[0] == b"once"
    global SESSION, ZYGOTE
    if not once and ISOLATE is not None and not SESSION:
        SESSION = True
        LOOP["set_session"]()
    # A one-shot execution with fresh namespaces writes its files in its own /workspace, so it cannot
    # use an interpreter started before the files were known.
    fresh = ISOLATE is not None and once
    files = req[7:] if fresh else ()
    if fresh and files and warm is not None:
        warm.discard()
        warm = None
    try:
        if not fresh:
            write_files(req[7:])
    except (OSError, ValueError) as e:
        clean = int(reset_after_command()) if once else 0
        return ("done", "", "", 0, 0, 0, 0, "", "could not write files: %s" % (e,), clean)
    stdin = memoryview(req[3])
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    startup_cpu = 0.0
    pid = None
    # Files of a fresh-namespace execution are written by its own process (child_files): not a fork's.
    zyg = zygote() if lang == "node" and not (fresh and files) else None
    if zyg is not None:
        try:
            pid, in_w, startup_cpu = zyg.launch(code, lim, fresh)
        except OSError as e:
            print("rollstream sandbox: the node fork server failed: %s" % (e,), file=sys.stderr)
            zyg.discard()
            zyg = None
            ZYGOTE = None
    spare = zyg.pid if zyg is not None else None
    zres = None
    if pid is None and warm is not None and warm.lang == lang and (ISOLATE is None or warm.fresh == fresh):
        try:
            pid, in_w, startup_cpu = warm.launch(code, lim)
        except OSError:
            warm.discard()
            pid = None
            startup_cpu = 0.0
    elif warm is not None:
        warm.discard()
    if pid is None:
        if lang == "python":
            load_site()
        in_r, in_w = os.pipe()
        os.set_inheritable(in_w, False)
        if lang == "python":
            before_python_fork()
        pid = os.fork()
        if pid == 0:
            child(lang, code, in_r, lim, fresh, files)
        os.close(in_r)
    t_start = time.monotonic()
    os.set_blocking(in_w, False)
    if not stdin:
        os.close(in_w)
        in_w = -1
    timed_out = killed = False
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    poller.register(CTL_IN, select.POLLIN)
    zfd = -1
    if zyg is not None:
        zfd = zyg.sock.fileno()
        poller.register(zfd, select.POLLIN)
    if in_w >= 0:
        poller.register(in_w, select.POLLOUT)
    reap()
    while (pid not in exited) if zyg is None else zres is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and not timed_out and not killed:
            timed_out = True
            kill_all(spare)
            continue
        for fd, ev in poller.poll(max(0, int(remaining * 1000)) + 1):
            if fd == zfd:
                r = zyg.result()
                # The server gone mid-execution (it cannot be signalled from inside): count it as killed.
                zres = r if r is not None else (_signal.SIGKILL, 0.0)
                if r is None:
                    killed = True
                    zyg.discard()
                    ZYGOTE = spare = None
                break
            if fd == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            elif fd == CTL_IN:
                msg = recv()
                if msg is None:
                    kill_all()
                    os._exit(0)
                if msg[0] == b"kill":
                    killed = True
                    kill_all(spare)
            elif fd == in_w:
                try:
                    n = os.write(in_w, stdin[:65536])
                    stdin = stdin[n:]
                except BlockingIOError:
                    pass
                except OSError:
                    stdin = stdin[:0]
                if not stdin:
                    poller.unregister(in_w)
                    os.close(in_w)
                    in_w = -1
        reap()
    wall_ms = (time.monotonic() - t_start) * 1000.0
    if in_w >= 0:
        os.close(in_w)
    kill_all(spare)
    if ZYGOTE is not None and (spare is None or ZYGOTE.pid in exited):
        # kill(-1) (a python or bash command of a session's sandbox) took the node fork server, or it died:
        # zygote() starts another when a node command comes.
        ZYGOTE.discard()
        ZYGOTE = None
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) * 1000.0
    if zres is not None:
        status, zcpu = zres
        cpu_ms += zcpu
    else:
        status = exited.pop(pid)
    cpu_ms = max(0.0, cpu_ms - startup_cpu)
    exited.clear()
    clean = int(reset_after_command()) if once else 0
    nonce = os.urandom(12).hex()
    marker = ("\0rs-end:" + nonce + "\0").encode()
    write_all(1, marker)
    write_all(2, marker)
    exit_code = sig = ""
    if os.WIFEXITED(status):
        exit_code = os.WEXITSTATUS(status)
    elif os.WIFSIGNALED(status):
        sig = SIGNAMES.get(os.WTERMSIG(status), "SIG%d" % os.WTERMSIG(status))
    return ("done", exit_code, sig, int(timed_out), int(killed), "%.3f" % cpu_ms, "%.3f" % wall_ms, nonce, "", clean)

def prestart(lang):
    # What the next command will find started: for node the fork server (it forks each execution when its
    # request comes); a python command's warm interpreter is the C loop's (serve_in_c).
    if lang == "node":
        zygote()

# In a survey child (pin_hot_pages): the C function that lists the pages it wrote, called after its program.
SURVEY_REPORT = None
# The program whose written pages pid 1 pins (pin-hot.h): print(1), then what a small solution does. An
# execution writes most of the same pages whatever its program (the interpreter's own state, the objects
# every program uses, the allocator's pools, the exit path); one listed but not written costs each fork a copy.
SURVEY_PROGRAM = (
    b"print(1)\n"
    b"def f(xs):\n    return sorted(x * 2 for x in xs if x % 3)\n"
    b"data = '3 1 2 7'\nvals = [int(t) for t in data.split()]\n"
    b"d = {str(v): v for v in vals}\nprint(f(vals), len(d), '%d-%s' % (1, 'x'), f'{2.5:.2f}', max(vals))\n"
)
PIN_MAX_PAGES = 1024

def run_forked_warm_child():
    """In a warm interpreter the C loop forked (fds placed, dumpable; stdin on fd 0): runs the program that
    comes on fd 3."""
    try:
        _signal.set_wakeup_fd(-1)
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        main = prepare_python()
        code = read_all(3).decode("utf-8", "replace")
        os.close(3)
        run_python(code, main)
    finally:
        os._exit(127)

def pin_hot_pages(loop):
    """Surveys what a python execution writes and pins those pages (pin-hot.h), before the first fork of
    a request's execution. The survey child is forked as an execution is (fork_warm) and runs its program
    as one does (run_forked_warm_child), its output on /dev/null. Returns the pages pinned, or -errno."""
    global SURVEY_REPORT
    r = loop["survey"](SURVEY_PROGRAM, len(SURVEY_PROGRAM))
    if r == 1:
        SURVEY_REPORT = loop["survey_report"]
        run_forked_warm_child()
    return r if r != 0 else loop["pin"](PIN_MAX_PAGES)

def before_python_fork():
    # The C loop counts this fork towards moving the interpreter's code onto huge pages (HUGE_TEXT_AFTER).
    LOOP["before_fork"]()

def load_fork_loop():
    """The per-execution loop in C (/.rs/forkserver.so, see forkserver.c)."""

    class PyObj(_ctypes._SimpleCData):
        _type_ = "O"

    class Long(_ctypes._SimpleCData):
        _type_ = "l"

    class Lib:
        _handle = _ctypes.dlopen(FORK_LOOP_SO, 2)  # RTLD_NOW

    def fn(name, restype):
        # FUNCFLAG_PYTHONAPI: called with the GIL held, as os.fork() is.
        class F(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI
            _restype_ = restype
        return F((name, Lib))

    names = b"\0".join(SIGNAMES.get(i, "").encode() for i in range(65))
    fn("rs_fs_init", Long)(wake_r, names, len(names))
    if REUSED:
        fn("rs_fs_huge_text_after", Long)(HUGE_TEXT_AFTER)
    loop = {
        "serve": fn("rs_fs_serve", PyObj),
        "warm": fn("rs_fs_warm", Long),
        "set_session": fn("rs_fs_set_session", Long),
        "take_exec_id": fn("rs_fs_take_exec_id", Long),
        "keep_setid_caps": fn("rs_fs_keep_setid_caps_across_exec", Long),
        "before_fork": fn("rs_fs_before_fork", Long),
        "survey": fn("rs_fs_survey", Long),
        "survey_report": fn("rs_fs_survey_report", Long),
        "pin": fn("rs_fs_pin_surveyed", Long),
        "seal": fn("rs_fs_seal", Long),
    }
    if FRESH_MOUNTS:
        if fn("rs_fs_configure", Long)(FRESH_MOUNTS.encode(), EXEC_FILTER, len(EXEC_FILTER)) != 0:
            print("rollstream sandbox: bad fresh-namespace settings", file=sys.stderr)
            os._exit(1)
        global ISOLATE
        ISOLATE = fn("rs_fs_isolate", Long)
        if EXEC_IDS:
            first, count = (int(x) for x in EXEC_IDS.split(":"))
            r = fn("rs_fs_exec_ids", Long)(first, count)
            if r != 0:
                print("rollstream sandbox: per-execution uids need CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_SYS_RESOURCE (error %d)" % -r, file=sys.stderr)
                os._exit(1)
    return loop

def serve_in_c(loop, fork_first):
    """Runs the C loop until it needs this one: returns (request, adopted warm interpreter), or
    (None, None) at the end of input; "node" when a node interpreter must be started next."""
    if fork_first:
        load_site()
    r = loop["serve"](int(fork_first))
    if r is None:
        return None, None
    if r == 0:
        run_forked_warm_child()
    if r == 1:
        return "node", None
    warm = None
    pid = loop["warm"](0)
    if pid > 0:
        warm = Warm(pid, loop["warm"](1), loop["warm"](2), bool(loop["warm"](4)))
        loop["warm"](3)
    return split_fields(r), warm

def main():
    global BASE_STATE, BASE_PIPES
    if CPUS:
        try:
            os.sched_setaffinity(0, {int(c) for c in CPUS.split(",")})
        except (OSError, ValueError) as e:
            print("rollstream sandbox: cannot run on CPUs %s (settings.cpus): %s" % (CPUS, e), file=sys.stderr)
            os._exit(1)
    BASE_STATE = own_state()
    BASE_PIPES = {fd: pipe_state(fd) for fd in (1, 2)}
    global TCP_CHECK
    TCP_CHECK = tcp_left() is False
    global LOOP
    loop = LOOP = load_fork_loop()
    in_c = PRESTART == "python"
    if in_c:
        load_site()  # before "ready": a ready sandbox has its modules loaded
        if REUSED:
            pin_hot_pages(loop)
    # A node sandbox's fork server pins its own hot pages: started before the seal, it seals itself after.
    if PRESTART == "node" and REUSED and SEAL_FILTER:
        zygote(pin=True)  # a server started later (one that died) starts after the seal below and inherits it
    if SEAL_FILTER and loop["seal"](SEAL_FILTER, len(SEAL_FILTER)) != 0:
        print("rollstream sandbox: could not load the seccomp filter that ends pid 1's start (the seal)", file=sys.stderr)
        os._exit(1)
    if not in_c:
        prestart(PRESTART)
    send("ready")
    while True:
        warm = None
        if in_c:
            req, warm = serve_in_c(loop, True)
            if req == "node":
                in_c = False
                prestart("node")
                continue
        else:
            req = recv()
        if req is None:
            break
        if req[0] not in (b"run", b"once"):
            continue
        res = run_command(req, warm)
        if warm is not None and warm.code_w >= 0:
            warm.discard()
        send(*res)
        # Sessions: start the next interpreter now, while the caller reads the result. The C loop
        # forks a python one itself and serves the next command if it can.
        nxt = req[6].decode()
        in_c = nxt == "python"
        if not in_c:
            prestart(nxt)
    kill_all()
    os._exit(0)

# Run as the sandbox's pid 1; tests load this file under another name to call its functions.
if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        os._exit(0)
