//! `cargo xtask`: placeholder until the CI driver lands.

fn main() {
    eprintln!("xtask: not implemented yet");
    std::process::exit(1);
}
