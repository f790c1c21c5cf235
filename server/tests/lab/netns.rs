//! Work inside a network namespace of the test's network lab (`ip netns add`): a
//! thread of its own enters the namespace (`setns`), so the sockets it makes, and the
//! threads it starts, live there; a socket keeps its namespace for good, whichever
//! thread uses it afterwards.

/// Runs `f` on a thread that entered network namespace `name` and returns what it
/// returned (a panic in `f` is the caller's).
pub fn run_in<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{name}");
    let thread = std::thread::spawn(move || {
        let ns =
            std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e} (made by the lab?)"));
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    });
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}
