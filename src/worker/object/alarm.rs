//! The object's alarm: kept at or before the earliest expiry in storage (lock rows and shared
//! holds), it deletes expired rows when it fires and hands the room they leave to waiting calls:
//! a permit's expiry frees its weight alone.

use super::*;

impl Inner {
    /// The earliest expiry in storage, exclusive rows and shared holds alike.
    pub(super) fn next_expiry(&self) -> Result<Option<u64>, JsValue> {
        let exclusive = first_number(self.exec(NEXT_EXPIRY, &[])?)?;
        if !self.shared_seen.get() {
            return Ok(exclusive);
        }
        let shared = first_number(self.exec(NEXT_SHARED_EXPIRY, &[])?)?;
        Ok(match (exclusive, shared) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Brings the alarm up to date with the rows written since it last was: when one of them
    /// expires before the alarm (or there is none, or this instance does not know it), calls
    /// `setAlarm` — synchronously, in the turn of the write, so alarm updates land in the order
    /// of the writes — and answers its promise. Otherwise (steady use: the alarm is already due
    /// at or before the new expiry) no storage call.
    pub(super) fn cover_writes(&self) -> Result<Option<Promise>, JsValue> {
        let Some(written) = self.uncovered.take() else {
            return Ok(None);
        };
        let at = match self.alarm_at.get() {
            Some(Some(at)) if at <= written => return Ok(None),
            // No alarm means no row but those just written (the alarm handler leaves none only
            // then, and every write since was covered), so the earliest of them is the next
            // expiry; an alarm later than a new expiry moves to it, which keeps it at or before
            // every row's.
            Some(_) => written,
            // Unknown: whatever a previous instance scheduled, the next expiry is right.
            None => match self.next_expiry() {
                Ok(next) => next.map_or(written, |n| n.min(written)),
                Err(e) => {
                    self.uncovered.set(Some(written));
                    return Err(e);
                }
            },
        };
        match self.storage.set_alarm(at as f64) {
            Ok(promise) => {
                self.alarm_at.set(Some(Some(at)));
                Ok(Some(promise))
            }
            Err(e) => {
                self.alarm_at.set(None);
                self.uncovered.set(Some(written));
                Err(storage_error(e))
            }
        }
    }

    /// The alarm's work (see [`LockDurableObjectCore::alarm`]), up to the `setAlarm` call it
    /// makes, if any.
    pub(super) fn fire(&self) -> Result<Option<Promise>, JsValue> {
        let now = now();
        let waited_for: Vec<String> = self.queues.borrow().keys().cloned().collect();
        for k in waited_for {
            if let Ok(k) = Key::new(k) {
                self.hand_over(&k, now);
            }
        }
        self.exec(DELETE_EXPIRED, &[JsValue::from_f64(now as f64)])?;
        if self.shared_seen.get() {
            self.exec(DELETE_EXPIRED_SHARED, &[JsValue::from_f64(now as f64)])?;
        }
        // The alarm that just fired is spent (workerd drops it when this handler succeeds
        // without setting another). The next expiry covers every row, those just handed over
        // included.
        let next = self.next_expiry()?;
        self.uncovered.set(None);
        self.alarm_at.set(Some(None));
        let Some(at) = next else {
            return Ok(None);
        };
        let set = self.storage.set_alarm(at as f64).map_err(storage_error)?;
        self.alarm_at.set(Some(Some(at)));
        Ok(Some(set))
    }
}
