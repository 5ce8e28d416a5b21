//! `--docs` (`make bench-docs`): publishes a full run into the repository's
//! documentation — the charts as docs/bench.svg and docs/curves.svg and the page
//! docs/performance.md, written whole from its template (`performance.md.in` beside
//! this file: the prose that says what is measured and why) with the run's figures in
//! place of `{{figures}}`, its cost curves in place of `{{curves}}` and the etcd side by
//! side in place of `{{peers}}` (or a line saying it was not measured). Nothing
//! else is read or kept, so the page always says what its last run measured. Plain
//! `make bench` never gets here, so a local run leaves the docs alone.

use std::io;

const TEMPLATE: &str = include_str!("performance.md.in");
const FIGURES: &str = "{{figures}}";
const PEERS: &str = "{{peers}}";
const CURVES: &str = "{{curves}}";

/// The chart's link, relative to the page (and to report.md beside its own chart).
pub const CHART_LINK: &str = "bench.svg";

pub fn publish(
    svg: &str,
    figures: &str,
    curves_svg: Option<&str>,
    curves: &str,
    peers: &str,
) -> io::Result<()> {
    // The repository's docs/, not this crate's directory (bench/).
    let docs = testkit::paths::workspace_root().join("docs");
    std::fs::create_dir_all(&docs)?;
    std::fs::write(docs.join(CHART_LINK), svg)?;
    if let Some(curves_svg) = curves_svg {
        std::fs::write(docs.join(super::curves::CHART_LINK), curves_svg)?;
    }
    let page = docs.join("performance.md");
    std::fs::write(&page, render(figures, curves, peers)?)?;
    eprintln!(
        "wrote {} and {}",
        docs.join(CHART_LINK).display(),
        page.display()
    );
    Ok(())
}

fn render(figures: &str, curves: &str, peers: &str) -> io::Result<String> {
    for placeholder in [FIGURES, CURVES, PEERS] {
        if TEMPLATE.matches(placeholder).count() != 1 {
            return Err(io::Error::other(format!(
                "performance.md.in must hold {placeholder} exactly once"
            )));
        }
    }
    Ok(TEMPLATE
        .replace(FIGURES, figures.trim_end())
        .replace(CURVES, curves.trim_end())
        .replace(PEERS, peers.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page renders with the etcd section and without it, every place filled once.
    #[test]
    fn the_page_renders_with_and_without_the_etcd_side_by_side() {
        for peers in ["| etcd table |", crate::report::peers::NOT_MEASURED] {
            let page = render("FIGURES-HERE", "CURVES-HERE", peers).expect("the template renders");
            assert_eq!(page.matches("FIGURES-HERE").count(), 1);
            assert_eq!(page.matches("CURVES-HERE").count(), 1);
            assert!(page.contains(peers));
            assert!(!page.contains("{{"));
        }
    }
}
