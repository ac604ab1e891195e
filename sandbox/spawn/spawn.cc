// posix_spawn for the sandbox's bwrap (see native-spawn.ts). glibc runs it as clone(CLONE_VM|CLONE_VFORK):
// no copy of the caller's page tables, the caller waits only for the child's exec. Three calls:
//   socketPair()                  -> [a, b]   a connected AF_UNIX stream pair, both close-on-exec
//   spawn(file, argv, fds)        -> pid      fds[i] becomes the child's fd i (-1: /dev/null); every other fd
//                                             is closed; own session (kill(-pid) reaches all); signals default
//   reap(pid)                     -> null while it runs, else [exitCode or -1, signal number or 0]
#include <napi.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char **environ;

namespace {

[[noreturn]] void ThrowErrno(Napi::Env env, const char *what, int err) {
  throw Napi::Error::New(env, std::string(what) + ": " + strerror(err));
}

Napi::Value SocketPair(const Napi::CallbackInfo &info) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) ThrowErrno(info.Env(), "socketpair", errno);
  Napi::Array out = Napi::Array::New(info.Env(), 2);
  out.Set(0u, sv[0]);
  out.Set(1u, sv[1]);
  return out;
}

// Closes the fds it holds when it goes out of scope (the high duplicates made for the file actions).
struct FdList {
  std::vector<int> fds;
  ~FdList() {
    for (int fd : fds) close(fd);
  }
};

Napi::Value Spawn(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsString() || !info[1].IsArray() || !info[2].IsArray())
    throw Napi::TypeError::New(env, "spawn(file: string, argv: string[], fds: number[])");
  std::string file = info[0].As<Napi::String>();
  Napi::Array argvIn = info[1].As<Napi::Array>();
  Napi::Array fdsIn = info[2].As<Napi::Array>();
  std::vector<std::string> args;
  for (uint32_t i = 0; i < argvIn.Length(); i++) args.push_back(argvIn.Get(i).As<Napi::String>());
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char *envp[] = {nullptr};  // bwrap gets an empty environment (it sets the sandbox's own)

  // Sources first moved above every target, so that no dup2 overwrites a source still to be used.
  FdList high;
  std::vector<int> src;
  for (uint32_t i = 0; i < fdsIn.Length(); i++) {
    int fd = fdsIn.Get(i).As<Napi::Number>().Int32Value();
    if (fd < 0) {
      src.push_back(-1);
      continue;
    }
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 64);
    if (h < 0) ThrowErrno(env, "fcntl(F_DUPFD_CLOEXEC)", errno);
    high.fds.push_back(h);
    src.push_back(h);
  }

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  int err = 0;
  for (size_t i = 0; i < src.size() && err == 0; i++)
    err = src[i] < 0 ? posix_spawn_file_actions_addopen(&fa, (int)i, "/dev/null", O_RDWR, 0)
                     : posix_spawn_file_actions_adddup2(&fa, src[i], (int)i);
  if (err == 0) err = posix_spawn_file_actions_addclosefrom_np(&fa, (int)src.size());
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  if (err == 0) err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  if (err == 0) err = posix_spawnattr_setsigdefault(&attr, &all);
  if (err == 0) err = posix_spawnattr_setsigmask(&attr, &none);
  pid_t pid = -1;
  if (err == 0) err = posix_spawn(&pid, file.c_str(), &fa, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) ThrowErrno(env, ("posix_spawn " + file).c_str(), err);
  return Napi::Number::New(env, pid);
}

Napi::Value Reap(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  pid_t pid = info[0].As<Napi::Number>().Int32Value();
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return env.Null();
  if (r < 0) ThrowErrno(env, "waitpid", errno);
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  out.Set(1u, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("socketPair", Napi::Function::New(env, SocketPair));
  exports.Set("spawn", Napi::Function::New(env, Spawn));
  exports.Set("reap", Napi::Function::New(env, Reap));
  return exports;
}

}  // namespace

NODE_API_MODULE(rs_spawn, Init)
