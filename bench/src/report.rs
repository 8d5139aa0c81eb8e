//! Figures: collected per scenario, printed as JSON lines and as a table.

use hdrhistogram::Histogram;

/// The result of one scenario on one backend.
#[derive(Clone, Debug)]
pub(crate) struct Figure {
    /// Scenario name (`seq`, `read-64`, ...).
    pub(crate) scenario: String,
    /// Backend name.
    pub(crate) backend: &'static str,
    /// What `runs` and `median` count (`calls/s`, `rows/s`, `bytes/object`, ...).
    pub(crate) unit: &'static str,
    /// The value of each run.
    pub(crate) runs: Vec<f64>,
    /// Latency percentiles of the median run, in microseconds.
    pub(crate) latency_us: Option<[f64; 3]>,
    /// Peak resident set size of the process so far, in MiB.
    pub(crate) peak_rss_mib: f64,
    /// This figure divided by `raw-commit` on the same backend, when both exist.
    pub(crate) ratio_vs_raw_commit: Option<f64>,
    /// Other named values.
    pub(crate) extra: Vec<(&'static str, f64)>,
}

impl Figure {
    /// A figure with no runs yet.
    pub(crate) fn new(
        scenario: impl Into<String>,
        backend: &'static str,
        unit: &'static str,
    ) -> Self {
        Self {
            scenario: scenario.into(),
            backend,
            unit,
            runs: Vec::new(),
            latency_us: None,
            peak_rss_mib: 0.0,
            ratio_vs_raw_commit: None,
            extra: Vec::new(),
        }
    }

    /// The extra value `name`, if the figure has one.
    pub(crate) fn extra(&self, name: &str) -> Option<f64> {
        self.extra.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// The median of the runs.
    pub(crate) fn median(&self) -> f64 {
        median(&mut self.runs.clone())
    }

    /// Records the latency percentiles of a run's histogram (nanoseconds).
    pub(crate) fn set_latency(&mut self, histogram: &Histogram<u64>) {
        let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
        self.latency_us = Some([us(0.5), us(0.99), us(0.999)]);
    }

    /// One JSON line.
    pub(crate) fn to_json(&self) -> String {
        let mut value = serde_json::json!({
            "scenario": self.scenario,
            "backend": self.backend,
            "unit": self.unit,
            "runs": self.runs,
            "median": self.median(),
            "peak_rss_mib": self.peak_rss_mib,
        });
        if let Some([p50, p99, p999]) = self.latency_us {
            value["p50_us"] = p50.into();
            value["p99_us"] = p99.into();
            value["p999_us"] = p999.into();
        }
        if let Some(ratio) = self.ratio_vs_raw_commit {
            value["ratio_vs_raw_commit"] = ratio.into();
        }
        for (name, v) in &self.extra {
            value[*name] = (*v).into();
        }
        value.to_string()
    }
}

/// The median of `values` (0 for none).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The latency histogram of the run whose rate is closest to the median so far: a figure's
/// percentiles come from one run, its median one.
#[derive(Default)]
pub(crate) struct MedianLatency(Option<(f64, Histogram<u64>)>);

impl MedianLatency {
    /// Adds a run's rate to `figure` and keeps its histogram if it is the closest to the median.
    pub(crate) fn offer(&mut self, figure: &mut Figure, rate: f64, histogram: Histogram<u64>) {
        figure.runs.push(rate);
        let median = figure.median();
        let closer = self
            .0
            .as_ref()
            .is_none_or(|(kept, _)| (rate - median).abs() <= (kept - median).abs());
        if closer {
            self.0 = Some((rate, histogram));
        }
    }

    /// Sets `figure`'s latency from the kept run, and its peak RSS.
    pub(crate) fn finish(self, figure: &mut Figure) {
        if let Some((_, histogram)) = self.0 {
            figure.set_latency(&histogram);
        }
        figure.peak_rss_mib = peak_rss_mib();
    }
}

/// Scenarios compared with `raw-commit`.
const COMPARED: &[&str] = &["seq", "hot", "spread", "spread-alarm", "cold"];

/// Sets `figure`'s ratio against the `raw-commit` figure of the same backend, if measured.
pub(crate) fn attach_baseline(figure: &mut Figure, earlier: &[Figure]) {
    if !COMPARED.contains(&figure.scenario.as_str()) {
        return;
    }
    if let Some(raw) = earlier
        .iter()
        .find(|f| f.scenario == "raw-commit" && f.backend == figure.backend)
    {
        let raw = raw.median();
        if raw > 0.0 {
            figure.ratio_vs_raw_commit = Some(figure.median() / raw);
        }
    }
}

/// Prints the human-readable table.
pub(crate) fn print_table(figures: &[Figure]) {
    println!();
    println!(
        "{:<14} {:<14} {:>14} {:<13} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "scenario", "backend", "median", "unit", "p50 µs", "p99 µs", "p999 µs", "×raw", "rss MiB"
    );
    for f in figures {
        let [p50, p99, p999] = f
            .latency_us
            .map(|l| l.map(|v| format!("{v:.1}")))
            .unwrap_or_else(|| ["-".into(), "-".into(), "-".into()]);
        let ratio = f
            .ratio_vs_raw_commit
            .map(|r| format!("{r:.2}"))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<14} {:<14} {:>14.0} {:<13} {:>9} {:>9} {:>9} {:>8} {:>9.1}",
            f.scenario,
            f.backend,
            f.median(),
            f.unit,
            p50,
            p99,
            p999,
            ratio,
            f.peak_rss_mib
        );
        for (name, value) in &f.extra {
            // Ratios with two decimals, counts with one.
            let decimals = if value.abs() < 10.0 { 2 } else { 1 };
            println!("{:<14} {:<14} {:>14.decimals$} {}", "", "", value, name);
        }
    }
}

/// Peak resident set size of this process, in MiB (Linux; 0 elsewhere).
pub(crate) fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A latency histogram in nanoseconds, from 1 ns to one hour, 3 significant figures.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Waits for every caller task and adds up their counts and latency histograms; the first
/// failure (a task's error or panic) is the result.
pub(crate) async fn gather<N>(
    tasks: &mut tokio::task::JoinSet<Result<(N, Histogram<u64>), String>>,
) -> Result<(N, Histogram<u64>), String>
where
    N: std::ops::AddAssign + Default + 'static,
{
    let mut total = N::default();
    let mut histogram = histogram();
    while let Some(result) = tasks.join_next().await {
        let (done, h) = result.map_err(|e| e.to_string())??;
        total += done;
        histogram.add(h).map_err(|e| e.to_string())?;
    }
    Ok((total, histogram))
}
