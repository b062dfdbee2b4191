//! Compiles the C server (`c/*.c`) with the usdt-markers C header.
fn main() {
    let manifest =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let include = manifest.join("../usdt-markers/include");
    let mut build = cc::Build::new();
    build
        .include(&include)
        .warnings(true)
        .flag_if_supported("-Wextra");
    if std::env::var_os("CARGO_FEATURE_NO_PROBES").is_some() {
        build.define("USDT_MARKERS_DISABLE", None);
    }
    for entry in std::fs::read_dir(manifest.join("c")).expect("c/ exists") {
        let path = entry.expect("readable c/").path();
        if path.extension().is_some_and(|e| e == "c") {
            println!("cargo::rerun-if-changed={}", path.display());
            build.file(path);
        }
    }
    println!(
        "cargo::rerun-if-changed={}",
        include.join("usdt_markers.h").display()
    );
    build.compile("demo_httpserver_c");
}
