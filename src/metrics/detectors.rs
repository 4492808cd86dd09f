//! The detectors' metrics: retractions of live reports, and the alerts Alertmanager's
//! webhook received, by what became of each.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetractionLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlertLabels {
    pub outcome: &'static str,
    pub alertname: String,
}

/// What a retraction may come to (`store::Retracted::as_str`).
const RETRACTION_OUTCOMES: [&str; 3] = ["kept", "ended", "absent"];

/// The longest alert name a series is labelled with; longer ones are cut there, so an
/// alert cannot make a label value of any size.
const MAX_ALERTNAME_LABEL: usize = 128;

pub struct DetectorMetrics {
    retractions: Family<RetractionLabels, Counter>,
    alerts: Family<AlertLabels, Counter>,
}

impl DetectorMetrics {
    pub(super) fn register(registry: &mut Registry) -> DetectorMetrics {
        let retractions = Family::<RetractionLabels, Counter>::default();
        registry.register(
            "retractions",
            "Retractions of live reports, by outcome: kept (other reports hold the block), \
             ended (it was the last: the block ended), absent (nothing to retract)",
            retractions.clone(),
        );
        for outcome in RETRACTION_OUTCOMES {
            let _ = retractions.get_or_create(&RetractionLabels { outcome });
        }
        let alerts = Family::<AlertLabels, Counter>::default();
        registry.register(
            "alerts",
            "Alerts received from Alertmanager's webhook, by outcome (blocked, repeated, \
             retracted, refused, ignored) and alert name",
            alerts.clone(),
        );
        DetectorMetrics {
            retractions,
            alerts,
        }
    }

    /// Counts one retraction that came to `outcome`.
    pub fn retracted(&self, outcome: &'static str) {
        self.retractions
            .get_or_create(&RetractionLabels { outcome })
            .inc();
    }

    /// Counts one alert of `alertname` that came to `outcome`.
    pub fn alert(&self, outcome: &'static str, alertname: &str) {
        let mut end = alertname.len().min(MAX_ALERTNAME_LABEL);
        while !alertname.is_char_boundary(end) {
            end -= 1;
        }
        let alertname = alertname[..end]
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        self.alerts
            .get_or_create(&AlertLabels { outcome, alertname })
            .inc();
    }
}
