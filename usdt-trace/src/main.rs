fn main() {
    std::process::exit(usdt_trace::cli::main());
}
