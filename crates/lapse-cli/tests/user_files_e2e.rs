//! End to end: the user's files and machine (SPEC section 8). What lapse
//! creates is private whatever the umask, nothing is written through a
//! planted symlink, a failed `record` leaves the previous file as it was, and
//! session directories of killed recorders do not pile up in /tmp.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lapse_testkit::{
    compile, ended, perf_refused, skip, stderr, wait_until, Lapse, WorkDir, HANG_GUARD,
};

const LAPSE: Lapse = Lapse::new(env!("CARGO_BIN_EXE_lapse"));

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Waits (for the program to make progress) until `path` exists.
fn wait_for(path: &Path, recorder: &mut std::process::Child) -> Option<()> {
    let start = Instant::now();
    while !path.exists() {
        if let Ok(Some(status)) = recorder.try_wait() {
            let mut err = String::new();
            if let Some(e) = recorder.stderr.as_mut() {
                let _ = std::io::Read::read_to_string(e, &mut err);
            }
            if perf_refused(&err) {
                return skip(err);
            }
            panic!("lapse record ended ({status}) first: {err}");
        }
        assert!(
            start.elapsed() < HANG_GUARD,
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(())
}

/// A killed recorder leaves its session directory behind (the next
/// recording removes it); a test leaves nothing behind.
fn remove_session_dirs_of(pid: u32) {
    let prefix = format!("lapse-{pid}-");
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

fn session_dirs_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("lapse-{pid}-");
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn session_directory_runtime_socket_and_data_file_are_private_under_umask_000() {
    // Before the fix they followed the umask: under umask 000 another user
    // could replace the runtime library that the target (and its children,
    // maybe root's) loads.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-umask");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "modes",
        r#"
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
static int mode_of(const char *p) { struct stat st; return stat(p, &st) ? -1 : (int)(st.st_mode & 0777); }
int main(void) {
    char sock[4096], lib[4096], dir[4096];
    snprintf(sock, sizeof sock, "%s", getenv("LAPSE_SOCKET"));
    snprintf(dir, sizeof dir, "%s", sock);
    snprintf(lib, sizeof lib, "%s", getenv("LD_PRELOAD"));
    lib[strcspn(lib, " :")] = 0;
    printf("dir %o lib %o sock %o\n", mode_of(dirname(dir)), mode_of(lib), mode_of(sock));
    return 0;
}
"#,
        &["-finstrument-functions", "-O1"],
    ) else {
        return;
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lapse"));
    cmd.args(["record", "-o", "out.lapse", "--"])
        .arg(&exe)
        .current_dir(&dir);
    // SAFETY: umask is async-signal-safe and touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let out = cmd.output().expect("run lapse record");
    if perf_refused(&stderr(&out)) {
        return skip(stderr(&out)).unwrap_or(());
    }
    assert!(out.status.success(), "lapse said: {}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "dir 700 lib 700 sock 600",
        "what the target saw of the session directory"
    );
    assert_eq!(mode(&dir.join("out.lapse")), 0o600, "the data file");
}

#[test]
fn a_failed_record_leaves_the_previous_file_as_it_was() {
    // Before the fix the output was replaced at once, and a recording that
    // recorded nothing ended with "exit status 0".
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-failed");
    // (built -O2, main is `xor %eax,%eax; ret`: shorter than the jump that
    // run-time patching writes, so nothing of it can be recorded)
    let Some(plain) = compile(
        &dir,
        "gcc",
        "plain",
        "int main(void) { return 0; }",
        &["-O2"],
    ) else {
        return;
    };
    let out_file = dir.join("out.lapse");
    std::fs::write(&out_file, b"precious").expect("write");
    let no_probes = LAPSE.in_dir(&dir).run([
        "record",
        "--method",
        "instrument",
        "-o",
        "out.lapse",
        "--",
        plain.to_str().expect("utf-8"),
    ]);
    assert!(!no_probes.status.success(), "recording nothing is an error");
    assert_eq!(
        stderr(&no_probes).lines().count(),
        1,
        "{}",
        stderr(&no_probes)
    );
    assert!(
        stderr(&no_probes).contains("recorded nothing"),
        "{}",
        stderr(&no_probes)
    );
    // A kernel thread has no user space to record (kthreadd, or any other).
    let kthread = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().nth(6)?.parse::<u64>().ok())
                    .is_some_and(|flags| flags & 0x0020_0000 != 0)
            })
        });
    if let Some(pid) = kthread {
        let out = LAPSE
            .in_dir(&dir)
            .run(["record", "-o", "out.lapse", "--pid", &pid.to_string()]);
        assert!(!out.status.success(), "a kernel thread records nothing");
        assert!(stderr(&out).contains("kernel thread"), "{}", stderr(&out));
    }
    assert_eq!(std::fs::read(&out_file).expect("read"), b"precious");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
}

#[test]
fn spill_and_recovery_never_write_through_a_planted_symlink() {
    // Before the fix the runtime opened <output>.spill and `lapse recover`
    // created <output>.recovering following symlinks: root overwrote a file
    // an attacker pointed them at.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-symlink");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "spiller",
        r#"
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE void work(long i) { sink ^= (uint64_t)i; }
int main(void) {
    for (long i = 0; i < 10000; i++) work(i);
    FILE *f = fopen("pid", "w"); fprintf(f, "%d\n", (int)getpid()); fclose(f);
    while (access("go", F_OK) != 0) { struct timespec d = {0, 2000000}; nanosleep(&d, NULL); }
    for (long i = 0; i < 100000; i++) work(i);
    rename("pid", "done");
    return 0;
}
"#,
        &["-finstrument-functions", "-O1"],
    ) else {
        return;
    };
    let victim = dir.join("victim");
    std::fs::write(&victim, b"root's file").expect("write victim");
    let run = |plant_spill_link: bool| -> Option<()> {
        for f in [
            "pid",
            "go",
            "done",
            "out.lapse",
            "out.lapse.spill",
            "out.lapse.recovering",
        ] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let mut recorder = Command::new(env!("CARGO_BIN_EXE_lapse"))
            .args(["record", "-o", "out.lapse", "--"])
            .arg(&exe)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lapse record");
        wait_for(&dir.join("pid"), &mut recorder)?;
        let target = std::fs::read_to_string(dir.join("pid")).expect("pid");
        // Wait until the first calls are in the data file, then kill the
        // recorder: the rest of the run goes to the spill.
        wait_until("the data file", || dir.join("out.lapse").exists());
        let _ = recorder.kill();
        let _ = recorder.wait();
        remove_session_dirs_of(recorder.id());
        if plant_spill_link {
            // (the runtime may have found the recorder gone and opened its
            // spill already: its writes then go to that file, not the name,
            // and the link planted in its place must still not be followed)
            let _ = std::fs::remove_file(dir.join("out.lapse.spill"));
            std::os::unix::fs::symlink(&victim, dir.join("out.lapse.spill")).expect("plant");
        }
        std::fs::write(dir.join("go"), b"").expect("go");
        let start = Instant::now();
        while !ended(&target) {
            if start.elapsed() > HANG_GUARD {
                // (this has hung twice in CI in 12 sessions: say where)
                let pid = target.trim();
                let read = |f: &str| {
                    std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default()
                };
                let (stat, wchan, stack) = (read("stat"), read("wchan"), read("stack"));
                if let Some(p) = pid.parse::<i32>().ok().filter(|&p| p > 0) {
                    // SAFETY: killing the test's own target, left hanging.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
                panic!("the target did not end: stat {stat} wchan {wchan} stack {stack}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(dir.join("done").exists(), "the target ran to its end");
        Some(())
    };
    // A symlink planted at the spill's name once the recorder is gone.
    let Some(()) = run(true) else {
        return;
    };
    assert_eq!(std::fs::read(&victim).expect("victim"), b"root's file");
    // A real spill, and a symlink planted where recovery used to write.
    let Some(()) = run(false) else {
        return;
    };
    assert!(dir.join("out.lapse.spill").exists(), "the runtime spilled");
    std::os::unix::fs::symlink(&victim, dir.join("out.lapse.recovering")).expect("plant");
    let rec = LAPSE.in_dir(&dir).run(["recover", "out.lapse"]);
    assert!(rec.status.success(), "lapse recover: {}", stderr(&rec));
    assert_eq!(std::fs::read(&victim).expect("victim"), b"root's file");
    assert_eq!(mode(&dir.join("out.lapse")), 0o600);
}

#[test]
fn session_directories_of_killed_recorders_are_removed_at_start() {
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-stale");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "tiny",
        "int main(void) { return 0; }",
        &["-finstrument-functions"],
    ) else {
        return;
    };
    // A recorder that is gone: the pid of a process that ended.
    let mut gone = Command::new("true").spawn().expect("run true");
    let _ = gone.wait();
    let stale = std::env::temp_dir().join(format!("lapse-{}-Zq3xYw", gone.id()));
    std::fs::create_dir_all(&stale).expect("stale dir");
    std::fs::write(stale.join("sock"), b"").expect("stale socket");
    let recorder = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .args(["record", "-o", "out.lapse", "--"])
        .arg(&exe)
        .current_dir(&dir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lapse record");
    let pid = recorder.id();
    let out = recorder.wait_with_output().expect("lapse record");
    if perf_refused(&stderr(&out)) {
        let _ = std::fs::remove_dir_all(&stale);
        return skip(stderr(&out)).unwrap_or(());
    }
    let gone_yet = !stale.exists();
    let _ = std::fs::remove_dir_all(&stale);
    assert!(gone_yet, "the stale session directory was removed");
    assert!(
        session_dirs_of(pid).is_empty(),
        "the recorder removed its own"
    );
}

#[test]
fn a_full_disk_stops_the_recording_not_the_supervision() {
    // Before the fix the recorder exited with its error at once: the target
    // ran on orphaned, its exit status lost, and an empty spill was
    // advertised as recoverable (instrumentation; sampling until the fifth
    // session). The disk is a 256 KiB tmpfs mounted in a mount namespace of
    // the test's own (root only; it vanishes with it); for sampling, whose
    // file grows slowly, all but 16 KiB of it are taken first.
    if lapse_testkit::root("a full disk is simulated with a tmpfs mount").is_none() {
        return;
    }
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-full");
    let Some(exe) = compile(
        &dir,
        "gcc",
        "calls",
        r#"
#include <stdint.h>
#include <stdio.h>
#define NOINLINE __attribute__((noinline))
volatile uint64_t sink;
NOINLINE void work(long i) { sink ^= (uint64_t)i * 2654435761u; }
NOINLINE void other(long i) { sink += (uint64_t)i; }
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    for (long i = 0; i < n; i++) { if (i % 3) work(i); else other(i); }
    printf("done\n");
    return 7;
}
"#,
        &["-finstrument-functions", "-O1"],
    ) else {
        return;
    };
    std::fs::create_dir_all(dir.join("disk")).expect("mount point");
    let script = r#"mount -t tmpfs -o size=256k tmpfs disk || exit 99
test "$FILL" -gt 0 && dd if=/dev/zero of=disk/fill bs=1k count="$FILL" 2>/dev/null
"$LAPSE" record --method "$METHOD" -F 4000 -o disk/out.lapse -- "$TARGET" "$N"
rc=$?
test -e disk/out.lapse.spill && echo "spill left"
ls -A disk | grep -v -e '^fill$' -e '^out.lapse$' && echo "temporary files left"
exit $rc"#;
    for (method, fill, n) in [
        ("instrument", "0", "20000000"),
        ("sample", "240", "400000000"),
    ] {
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", script])
            .env("LAPSE", env!("CARGO_BIN_EXE_lapse"))
            .env("TARGET", &exe)
            .env("METHOD", method)
            .env("FILL", fill)
            .env("N", n)
            .current_dir(&dir)
            .output();
        let out = match out {
            Ok(o) if o.status.code() != Some(99) => o,
            Ok(o) => return skip(format!("cannot mount a tmpfs: {}", stderr(&o))).unwrap_or(()),
            Err(e) => return skip(format!("unshare is not available: {e}")).unwrap_or(()),
        };
        let err = stderr(&out);
        if perf_refused(&err) {
            return skip(err).unwrap_or(());
        }
        assert_eq!(
            out.status.code(),
            Some(7),
            "{method}: the target's status; lapse said: {err}"
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "done\n",
            "{method}: the target ran to its end, no spill or file left"
        );
        assert!(err.contains("No space left on device"), "{method}: {err}");
        assert!(err.contains("exit status 7"), "{method}: {err}");
        assert!(
            err.contains("disk/out.lapse"),
            "{method}: names the file asked for: {err}"
        );
        assert!(
            !err.contains("lapse recover"),
            "{method}: nothing to recover is advertised: {err}"
        );
    }
}

/// True for a character device (what /dev/null must stay).
fn is_char_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A program with probes that prints nothing (its stdout may carry a
/// recording) and makes `argv[1]` calls.
fn quiet_calls(dir: &Path) -> Option<PathBuf> {
    compile(
        dir,
        "gcc",
        "quiet",
        r#"
#include <stdint.h>
#include <stdlib.h>
volatile uint64_t sink;
__attribute__((noinline)) void work(long i) { sink ^= (uint64_t)i * 2654435761u; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < n; i++) work(i);
    return 0;
}
"#,
        &["-finstrument-functions", "-O1", "-g"],
    )
}

#[test]
fn outputs_that_are_not_regular_files_are_written_in_place() {
    // Before the fix `record -o /dev/null` as root wrote /dev/.null.partial-*
    // and renamed it over the machine's /dev/null; `-o -` wrote a file named
    // "-". A device node of the test's own stands in for /dev/null.
    if lapse_testkit::root("a character device is made with mknod").is_none() {
        return;
    }
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-in_place");
    let Some(exe) = quiet_calls(&dir) else {
        return;
    };
    let exe = exe.to_str().expect("utf-8");
    let null = dir.join("null");
    let c = std::ffi::CString::new(null.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: a NUL-terminated path; makes the device 1:3 (the null device).
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(rc, 0, "mknod: {}", std::io::Error::last_os_error());
    let before = names(&dir);
    for method in ["instrument", "sample"] {
        let out = LAPSE.in_dir(&dir).run([
            "record", "--method", method, "-o", "null", "--", exe, "100000",
        ]);
        if perf_refused(&stderr(&out)) {
            return skip(stderr(&out)).unwrap_or(());
        }
        assert!(out.status.success(), "{method}: {}", stderr(&out));
        assert!(is_char_device(&null), "{method}: the device was replaced");
        assert_eq!(names(&dir), before, "{method}: files left beside it");
    }
    // export and import into the device.
    assert!(LAPSE
        .in_dir(&dir)
        .run(["record", "-o", "out.lapse", "--", exe])
        .status
        .success());
    let export =
        LAPSE
            .in_dir(&dir)
            .run(["export", "out.lapse", "--format", "chrome", "-o", "null"]);
    assert!(export.status.success(), "{}", stderr(&export));
    let json =
        LAPSE
            .in_dir(&dir)
            .run(["export", "out.lapse", "--format", "chrome", "-o", "t.json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let import = LAPSE.in_dir(&dir).run(["import", "t.json", "-o", "null"]);
    assert!(import.status.success(), "{}", stderr(&import));
    assert!(
        is_char_device(&null),
        "export or import replaced the device"
    );
    // Standard output by `-`, by /dev/stdout and by a link to /proc/self/fd/1:
    // the recording arrives on the pipe, the link stays a link.
    std::os::unix::fs::symlink("/proc/self/fd/1", dir.join("to-stdout")).expect("symlink");
    let before = names(&dir);
    for output in ["-", "/dev/stdout", "to-stdout"] {
        for method in ["instrument", "sample"] {
            let out = LAPSE.in_dir(&dir).run([
                "record", "--method", method, "-o", output, "--", exe, "100000",
            ]);
            assert!(out.status.success(), "{output} {method}: {}", stderr(&out));
            assert!(
                out.stdout.starts_with(lapse_data::format::MAGIC) && out.stdout.len() > 200,
                "{output} {method}: {} bytes on stdout",
                out.stdout.len()
            );
            assert_eq!(names(&dir), before, "{output} {method}: files left");
        }
        let out =
            LAPSE
                .in_dir(&dir)
                .run(["export", "out.lapse", "--format", "chrome", "-o", output]);
        assert!(out.status.success(), "{output}: {}", stderr(&out));
        assert!(
            out.stdout.starts_with(b"{"),
            "{output}: the export on stdout"
        );
    }
    assert!(std::fs::symlink_metadata(dir.join("to-stdout"))
        .expect("link")
        .is_symlink());
}

#[test]
fn a_failed_export_or_import_keeps_the_previous_file() {
    // Before the fix export and import truncated the file first: a full disk
    // left a half-written file where the user's was (export then deleted it).
    // The disk is a 64 KiB tmpfs of the test's own mount namespace (root).
    if lapse_testkit::root("a full disk is simulated with a tmpfs mount").is_none() {
        return;
    }
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-failed_export");
    let Some(exe) = quiet_calls(&dir) else {
        return;
    };
    let rec = LAPSE.in_dir(&dir).run([
        "record",
        "-o",
        "out.lapse",
        "--",
        exe.to_str().expect("utf-8"),
        "400000",
    ]);
    if perf_refused(&stderr(&rec)) {
        return skip(stderr(&rec)).unwrap_or(());
    }
    assert!(rec.status.success(), "{}", stderr(&rec));
    let json =
        LAPSE
            .in_dir(&dir)
            .run(["export", "out.lapse", "--format", "chrome", "-o", "t.json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    std::fs::create_dir_all(dir.join("disk")).expect("mount point");
    let script = r#"mount -t tmpfs -o size=64k tmpfs disk || exit 99
echo precious > disk/out
"$LAPSE" export out.lapse --format chrome -o disk/out; echo "export $?"
cat disk/out
"$LAPSE" import t.json -o disk/out; echo "import $?"
cat disk/out
ls -A disk"#;
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", script])
        .env("LAPSE", env!("CARGO_BIN_EXE_lapse"))
        .current_dir(&dir)
        .output();
    let out = match out {
        Ok(o) if o.status.code() != Some(99) => o,
        Ok(o) => return skip(format!("cannot mount a tmpfs: {}", stderr(&o))).unwrap_or(()),
        Err(e) => return skip(format!("unshare is not available: {e}")).unwrap_or(()),
    };
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said,
        "export 1\nprecious\nimport 1\nprecious\nout\n",
        "lapse said: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("No space left"), "{}", stderr(&out));
}

#[test]
fn the_demo_builds_in_a_private_directory_of_its_own() {
    // Before the fix the demo wrote its program into $TMPDIR/lapse-demo-<pid>,
    // following a link planted at that name into another user's directory.
    let dir = WorkDir::new(env!("CARGO_TARGET_TMPDIR"), "user_files-demo");
    let tmp = dir.join("tmp");
    let victim = dir.join("victim");
    std::fs::create_dir_all(&tmp).expect("tmp");
    std::fs::create_dir_all(&victim).expect("victim");
    // Links at the names of the next few hundred pids.
    let next: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    for pid in next + 1..next + 400 {
        std::os::unix::fs::symlink(&victim, tmp.join(format!("lapse-demo-{pid}"))).expect("plant");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_lapse"))
        .arg("demo")
        .env("TMPDIR", &tmp)
        .current_dir(&dir)
        .output()
        .expect("run lapse demo");
    if perf_refused(&stderr(&out)) {
        return skip(stderr(&out)).unwrap_or(());
    }
    if stderr(&out).contains("without a C compiler") {
        return skip(stderr(&out)).unwrap_or(());
    }
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        names(&victim).is_empty(),
        "the demo wrote into a planted link"
    );
    assert_eq!(
        names(&tmp).len(),
        399,
        "the demo's own directory is removed"
    );
}
