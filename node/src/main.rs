//! The `mew` binary: parses the command line and hands over to the library.

// jemalloc rather than the system's malloc: after a load (thousands of streams, a burst of
// tasks) glibc keeps what was freed resident in its per-thread arenas, while jemalloc's
// background thread hands it back to the system within seconds (its decay).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // Without its background thread jemalloc purges only when the program allocates again,
    // so an idle node would keep the memory of its last load. This workspace's builds turn
    // it on already (.cargo/config.toml); a build without those settings gets it here.
    #[cfg(not(target_env = "msvc"))]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("mew: warning: memory freed after a load may stay with the process: {e}");
    }
    mew_node::cli::main()
}
