//! The `mew` binary: parses the command line and hands over to the library.

fn main() -> std::process::ExitCode {
    mew_node::cli::main()
}
