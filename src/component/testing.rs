//! The `keel-lock-testing` world's `conformance` export (feature `testing`): the core's store
//! properties, run inside the component against the host's bucket.

use super::bindings::exports::keel::lock::conformance as wit_conformance;
use super::bindings::exports::keel::lock::types::LockError;
use super::{block_on, invalid, open_bucket, Component, WasiRuntime};
use crate::conformance::{self, ConformanceOptions, PropertyResult, Verdict};
use crate::input::{Ttl, MAX_KEY_BYTES, MAX_WAIT_MS};

/// Most contenders a conformance run accepts.
const MAX_CONTENDERS: u32 = 10_000;

impl wit_conformance::Guest for Component {
    fn properties() -> Vec<String> {
        conformance::PROPERTIES
            .iter()
            .map(|p| (*p).to_owned())
            .collect()
    }

    fn check_all(
        options: wit_conformance::Options,
    ) -> Result<Vec<wit_conformance::Outcome>, LockError> {
        let short = Ttl::from_ms(options.short_ttl_ms).map_err(invalid)?;
        if options.settle_ms > MAX_WAIT_MS {
            return Err(LockError::InvalidInput(format!(
                "settle-ms must be at most {MAX_WAIT_MS}, got {}",
                options.settle_ms
            )));
        }
        if options.contenders > MAX_CONTENDERS {
            return Err(LockError::InvalidInput(format!(
                "contenders must be at most {MAX_CONTENDERS}, got {}",
                options.contenders
            )));
        }
        // Property keys are `<prefix><property name>:<12 hex digits>`; leave room for the longest.
        let room = MAX_KEY_BYTES - 64;
        if options.key_prefix.len() > room {
            return Err(LockError::InvalidInput(format!(
                "key-prefix is {} bytes; the limit is {room}",
                options.key_prefix.len()
            )));
        }
        let store = open_bucket(&options.bucket)?;
        let run = ConformanceOptions {
            key_prefix: options.key_prefix,
            short_ttl_ms: short.as_ms(),
            settle_ms: options.settle_ms,
            contenders: options.contenders as usize,
        };
        let outcomes = block_on(conformance::check_all(&store, &WasiRuntime, &run));
        Ok(outcomes
            .into_iter()
            .map(|(property, result)| outcome(property, result))
            .collect())
    }
}

/// A property's result as the WIT record reports it.
fn outcome(property: &str, result: PropertyResult) -> wit_conformance::Outcome {
    let (violation, not_applicable) = match result {
        Ok(Verdict::Holds) => (None, None),
        Ok(Verdict::NotApplicable(why)) => (None, Some(why)),
        Err(violation) => (Some(violation.message), None),
    };
    wit_conformance::Outcome {
        property: property.to_owned(),
        violation,
        not_applicable,
    }
}
