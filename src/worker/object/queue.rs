//! The object's waiting calls: an in-memory FIFO queue per key (exclusive and shared waiters
//! alike), the hand-over to the front calls whose wait is not spent while each fits, and each
//! queued call's own look at the next expiry.

use super::*;

/// An `acquireOrWait` or `acquireSharedOrWait` call parked in its key's queue.
pub(super) struct Waiter {
    pub(super) id: u32,
    pub(super) owner: OwnerToken,
    pub(super) ttl: Ttl,
    /// Exclusive, or the permits it waits for.
    pub(super) holding: Holding,
    /// The metadata its hold will carry, or `null`.
    pub(super) said: JsValue,
    /// When it joined the queue, by the object's clock.
    pub(super) since: u64,
    /// When its wait is spent, by the object's clock: from then on it is never handed the key.
    pub(super) give_up_at: u64,
    /// `resolve` and `reject` of the waiting call's promise, until whoever ends the wait takes
    /// them.
    pub(super) answer: RefCell<Option<(Function, Function)>>,
    /// The timer of its next look, while one is set.
    pub(super) timer: RefCell<Option<JsValue>>,
}

/// How a wait ended.
pub(super) enum Outcome {
    /// The key was handed over; the grant is already in storage.
    Granted(Grant),
    /// The caller withdrew, or the wait was spent before the key came free.
    NotGranted,
    /// The hand-over failed in storage.
    Failed(JsValue),
}

impl Waiter {
    fn is_settled(&self) -> bool {
        self.answer.borrow().is_none()
    }
}

impl Inner {
    pub(super) fn has_waiters(&self, key: &Key) -> bool {
        self.queues.borrow().contains_key(key.as_str())
    }

    pub(super) fn waiting(&self) -> usize {
        self.queues.borrow().values().map(VecDeque::len).sum()
    }

    /// The calls queued for `key` whose wait is not spent at `now`.
    pub(super) fn waiting_for(&self, key: &Key, now: u64) -> usize {
        let queues = self.queues.borrow();
        let queue = queues.get(key.as_str());
        queue.map_or(0, |q| q.iter().filter(|w| w.give_up_at > now).count())
    }

    /// Grants `key` to its front waiters in order while each fits beside what is live at `now`
    /// (one writer; or readers and permits until the next does not fit — nobody passes the
    /// front waiter): writes each hold and its fence, then settles the waiter (its call resolves
    /// once the alarm covers the new row). A waiter whose wait is spent by `now` (the object was
    /// busy when its timer was due) is answered `false` and passed over, as if its timer had
    /// run first. A storage failure fails that waiter's call rather than the operation that
    /// freed the key, and ends this hand-over; a failed read leaves the queue alone (the
    /// waiters' timers try again). Answers whether it took any waiter out of the queue.
    pub(super) fn hand_over(&self, key: &Key, now: u64) -> bool {
        let mut popped = false;
        while let Some(waiter) = self.front_waiter(key) {
            if waiter.give_up_at <= now {
                self.leave(key, &waiter);
                popped = true;
                self.settle(&waiter, Outcome::NotGranted);
                continue;
            }
            let (owner, ttl, said) = (&waiter.owner, waiter.ttl, &waiter.said);
            let outcome = match self.take_holding(key, owner, ttl, waiter.holding, said, now) {
                Ok(SharedGrant::Granted(grant)) => {
                    Outcome::Granted(grant.waited(now.saturating_sub(waiter.since)))
                }
                // Not yet (a mismatched limit too: it waits for the other holds to go).
                Ok(_) => break,
                Err(e) => Outcome::Failed(e),
            };
            self.leave(key, &waiter);
            popped = true;
            let failed = matches!(outcome, Outcome::Failed(_));
            self.settle(&waiter, outcome);
            if failed {
                break;
            }
        }
        popped
    }

    /// The oldest waiter in `key`'s queue.
    pub(super) fn front_waiter(&self, key: &Key) -> Option<Rc<Waiter>> {
        self.queues.borrow().get(key.as_str())?.front().cloned()
    }

    /// Takes the waiter `pick` chooses out of `key`'s queue; a queue left empty goes with it.
    pub(super) fn remove_waiter(
        &self,
        key: &Key,
        pick: impl FnOnce(&mut VecDeque<Rc<Waiter>>) -> Option<Rc<Waiter>>,
    ) -> Option<Rc<Waiter>> {
        let mut queues = self.queues.borrow_mut();
        let queue = queues.get_mut(key.as_str())?;
        let picked = pick(queue);
        if queue.is_empty() {
            queues.remove(key.as_str());
        }
        picked
    }

    /// Takes `waiter` out of `key`'s queue (a no-op when the hand-over already took it).
    pub(super) fn leave(&self, key: &Key, waiter: &Waiter) {
        self.remove_waiter(key, |queue| {
            let at = queue.iter().position(|t| t.id == waiter.id)?;
            queue.remove(at)
        });
    }

    /// Takes `owner`'s oldest waiter out of `key`'s queue, if it is queued.
    pub(super) fn dequeue(&self, key: &Key, owner: &OwnerToken) -> Option<Rc<Waiter>> {
        self.remove_waiter(key, |queue| {
            let at = queue.iter().position(|t| t.owner == *owner)?;
            queue.remove(at)
        })
    }

    /// `key`'s queued waiter `id`, if it is still queued.
    pub(super) fn waiter(&self, key: &str, id: u32) -> Option<Rc<Waiter>> {
        let queues = self.queues.borrow();
        queues.get(key)?.iter().find(|t| t.id == id).cloned()
    }

    /// Ends `waiter`'s wait with `outcome` (once: later calls do nothing) and stops its timer.
    /// A grant is answered once the alarm covers the rows written so far.
    pub(super) fn settle(&self, waiter: &Waiter, outcome: Outcome) {
        let Some((resolve, reject)) = waiter.answer.borrow_mut().take() else {
            return;
        };
        if let Some(timer) = waiter.timer.borrow_mut().take() {
            stop_looking(&timer);
        }
        let answer = match outcome {
            Outcome::Granted(grant) => {
                waited_grant_to_js(grant).and_then(|grant| self.answer_with(grant).map(Into::into))
            }
            Outcome::NotGranted => Ok(JsValue::FALSE),
            Outcome::Failed(e) => Err(e),
        };
        // Settling a promise runs no JS code of its own, so these calls cannot fail.
        let _ = match answer {
            Ok(value) => resolve.call1(&JsValue::UNDEFINED, &value),
            Err(error) => reject.call1(&JsValue::UNDEFINED, &error),
        };
    }

    /// A queued call's look, when it queues and whenever its timer fires: it ends the wait
    /// once it is spent, hands the key over at once when the front waiters fit, and otherwise
    /// sets its timer for the next expiry of a live hold (a holder may never release) or its
    /// own deadline, whichever is first. A hand-over settles the waiter in between.
    pub(super) fn look(&self, key: &Key, waiter: &Waiter) {
        loop {
            if waiter.is_settled() {
                return;
            }
            let now = now();
            if now >= waiter.give_up_at {
                self.leave(key, waiter);
                self.settle(waiter, Outcome::NotGranted);
                // It may have been the front waiter that did not fit: those behind may now.
                self.hand_over(key, now);
                return;
            }
            // Room by this reading (a hold expired since the call queued): hand it over now
            // rather than wait for the alarm. Each such pass takes at least one waiter out of
            // the queue (this one, or one before it), so the loop ends.
            if self.hand_over(key, now) {
                continue;
            }
            let until = match self.expiry(key, now) {
                Ok(Some(expiry)) => expiry.min(waiter.give_up_at),
                Ok(None) | Err(_) => waiter.give_up_at,
            };
            let ms = until.saturating_sub(now).max(1) as f64;
            let timer = look_later(ms, &self.look, key.as_str(), waiter.id);
            *waiter.timer.borrow_mut() = Some(timer);
            return;
        }
    }
}
