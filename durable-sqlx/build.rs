//! Lists the migration files of each backend (`migrations/<backend>/NNNN_name.sql`, with its
//! reverse `NNNN_name.down.sql`) as a table of embedded migrations, so that a file added to the
//! directory is applied (and can be rolled back) without being listed by hand.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    for backend in ["sqlite", "postgres"] {
        let dir = manifest.join("migrations").join(backend);
        println!("cargo:rerun-if-changed={}", dir.display());
        let table = table(&dir);
        std::fs::write(out.join(format!("{backend}_migrations.rs")), table)
            .expect("write the migration table");
    }
}

/// The Rust expression of one backend's table, in order of version.
fn table(dir: &Path) -> String {
    let mut ups: Vec<(i64, String, PathBuf)> = std::fs::read_dir(dir)
        .expect("read the migrations directory")
        .filter_map(|entry| {
            let path = entry.expect("read a migrations entry").path();
            let name = path.file_name()?.to_str()?.to_owned();
            let stem = name.strip_suffix(".sql")?;
            if stem.ends_with(".down") {
                return None;
            }
            let (number, words) = stem.split_once('_')?;
            let version = number.parse().ok()?;
            Some((version, words.replace('_', " "), path))
        })
        .collect();
    ups.sort_by_key(|(version, ..)| *version);
    let mut table = String::from("&[\n");
    for (version, description, up) in ups {
        let down = up.with_extension("down.sql");
        let down = if down.exists() {
            format!("::core::option::Option::Some(include_str!({:?}))", down)
        } else {
            "::core::option::Option::None".to_owned()
        };
        let _ = writeln!(
            table,
            "    Migration {{ version: {version}, description: {description:?}, sql: include_str!({up:?}), down: {down} }},"
        );
    }
    table.push(']');
    table
}
