//! Ending or prolonging a hold: release (the handle's own hold only) and extend, and how a
//! store's answer to either is recorded against the hold it was about.

use super::*;

impl<S: LockStore, R: Runtime> Lock<S, R> {
    /// Frees the key if this handle still owns it. Answers `false`, without throwing, when the
    /// handle does not hold it: never acquired, already released, or expired (and perhaps taken
    /// by someone else, whose hold is left untouched).
    pub async fn release(&self) -> LockResult<bool, S> {
        #[cfg(feature = "std")]
        if let Some(listener) = &self.events {
            return Box::pin(self.release_told(listener)).await;
        }
        self.release_untold().await
    }

    /// [`Lock::release`], told to no listener.
    pub(super) async fn release_untold(&self) -> LockResult<bool, S> {
        match self.owner() {
            Some(owner) => self.release_hold(&owner).await,
            None => Ok(false),
        }
    }

    /// Releases the hold taken with `owner` (not whatever the handle holds by the time the
    /// store answers: a newer acquire on this handle keeps its own hold).
    pub(super) async fn release_hold(&self, owner: &OwnerToken) -> LockResult<bool, S> {
        self.releasing(owner);
        let released = self
            .call(Operation::Release, self.store.release(&self.key, owner))
            .await?;
        self.released(owner, released);
        Ok(released)
    }

    /// A release of the hold taken with `owner` is being sent: for its watchers the hold is
    /// released from now on, whatever the store answers and whatever this handle holds by then.
    pub(crate) fn releasing(&self, owner: &OwnerToken) {
        if let Hold::Held {
            owner: current,
            ending: Some(told),
            ..
        } = &*self.hold.borrow()
        {
            if current == owner {
                told.set(Ending::Released);
            }
        }
    }

    /// Records the store's answer to a release made with `owner`: the hold ends, or — refused —
    /// is known lost to this handle (its watchers still count it released: its holder let go).
    pub(crate) fn released(&self, owner: &OwnerToken, released: bool) {
        let next = if released { Hold::None } else { Hold::Lost };
        self.record_outcome(owner, next, Ending::Released);
    }

    /// Resets the expiry to `ttl` (default: the lock's TTL) from now. Fails with
    /// [`Error::NotHeld`] when the lock was lost, expired or never acquired: carrying on in the belief
    /// that one holds a lock one does not is the bug this prevents.
    pub async fn extend(&self, ttl: Option<Ttl>) -> LockResult<(), S> {
        #[cfg(feature = "std")]
        if let Some(listener) = &self.events {
            return Box::pin(self.extend_told(listener, ttl)).await;
        }
        self.extend_untold(ttl).await
    }

    /// [`Lock::extend`], told to no listener: a run's keep-alive extends this way (its loss is
    /// told by the run).
    pub(crate) async fn extend_untold(&self, ttl: Option<Ttl>) -> LockResult<(), S> {
        let ttl = ttl.unwrap_or(self.ttl);
        let sent = self.runtime.monotonic_ms();
        let owner = self.extending(sent)?;
        let extended = self
            .call(Operation::Extend, self.store.extend(&self.key, &owner, ttl))
            .await?;
        self.extended(&owner, sent, ttl, extended)
    }

    /// The owner token an extend made at `now` (monotonic) is made under: the hold's, or
    /// [`Error::NotHeld`] when there is none or its deadline has passed. An expired hold is
    /// presumed lost (`is_expired` already says so, and the store may have handed the key on);
    /// the store is not asked to revive it.
    pub(crate) fn extending(&self, now: u64) -> LockResult<OwnerToken, S> {
        match &*self.hold.borrow() {
            Hold::Held {
                owner, deadline, ..
            } if now < *deadline => Ok(owner.clone()),
            _ => Err(self.not_held(HoldOperation::Extend)),
        }
    }

    /// Records the store's answer to an extend for `ttl` made under `owner`, sent at `sent`
    /// (monotonic): the hold's deadline moves to `sent + ttl`, or — refused — the hold is known
    /// lost, and that is [`Error::NotHeld`].
    pub(crate) fn extended(
        &self,
        owner: &OwnerToken,
        sent: u64,
        ttl: Ttl,
        extended: bool,
    ) -> LockResult<(), S> {
        if !extended {
            self.record_outcome(owner, Hold::Lost, Ending::Lost);
            return Err(self.not_held(HoldOperation::Extend));
        }
        let mut hold = self.hold.borrow_mut();
        if let Hold::Held {
            owner: current,
            deadline,
            ..
        } = &mut *hold
        {
            if current == owner {
                *deadline = sent.saturating_add(ttl.as_ms());
            }
        }
        Ok(())
    }

    /// Records the outcome of a store call made with `owner`, unless a concurrent acquire on
    /// this handle has since replaced the hold (then that newer hold stands).
    fn record_outcome(&self, owner: &OwnerToken, next: Hold, ending: Ending) {
        let mut hold = self.hold.borrow_mut();
        if matches!(&*hold, Hold::Held { owner: current, .. } if current == owner) {
            hold.end(next, ending);
        }
    }

    pub(super) fn not_held(&self, attempted: HoldOperation) -> Error<S::Error> {
        Error::NotHeld {
            key: self.key.as_str().to_owned(),
            attempted,
        }
    }
}
