//! The multi-key properties: a [`MultiLock`] holds all of its keys or none, overlapping sets
//! taken in opposite orders all complete, and a store's one-step `acquire_many` is atomic.

use std::fmt::Debug;

use super::{join_all, Ctx, Verdict, Violation};
use crate::error::Error;
use crate::input::{AcquireOptions, Key};
use crate::lock::MultiLock;
use crate::runtime::Runtime;
use crate::share::SharedGrant;
use crate::store::{LockStore, ManyGrant};
use crate::token::OwnerToken;

impl<S: LockStore, R: Runtime> Ctx<'_, S, R>
where
    S::Error: Debug,
{
    /// A lock error met by a multi-key property, as a violation.
    fn multi_failed(&self, what: &str, error: Error<S::Error>) -> Violation {
        self.fail(format!("a multi-key {what} failed: {error:?}"))
    }

    /// Whether each of `keys` reads as held.
    async fn held(&self, keys: &[Key]) -> Result<Vec<bool>, Violation> {
        let mut held = Vec::with_capacity(keys.len());
        for key in keys {
            held.push(self.is_locked(key).await?);
        }
        Ok(held)
    }

    pub(super) async fn several_keys_all_or_nothing(&self) -> Result<(), Violation> {
        let mut keys = (0..4).map(|_| self.key()).collect::<Result<Vec<_>, _>>()?;
        keys.sort();
        let holder = self.owner()?;
        // The third key in the order they are taken is held: two are taken before it is refused.
        self.check(
            self.acquire(&keys[2], &holder, self.long()).await?,
            "acquire of a free key answered false",
        )?;
        let reversed: Vec<Key> = keys.iter().rev().cloned().collect();
        let multi = MultiLock::new(reversed, self.long(), self.store, self.runtime)
            .map_err(|e| self.fail(e.to_string()))?;
        let now = AcquireOptions::immediately();
        let got = multi
            .acquire(now)
            .await
            .map_err(|e| self.multi_failed("acquire", e))?;
        self.check(!got, "a multi-key acquire was granted beside a held key")?;
        let left = self.held(&keys).await?;
        self.check(
            left == [false, false, true, false],
            &format!("a refused multi-key acquire left keys held: {left:?} (only the third is held by another)"),
        )?;
        self.release(&keys[2], &holder).await?;
        let got = multi
            .acquire(now)
            .await
            .map_err(|e| self.multi_failed("acquire", e))?;
        self.check(got, "a multi-key acquire of free keys was refused")?;
        self.check(
            self.held(&keys).await? == [true; 4],
            "a granted multi-key acquire left a key free",
        )?;
        let released = multi
            .release()
            .await
            .map_err(|e| self.multi_failed("release", e))?;
        self.check(released, "a multi-key release answered false")?;
        self.check(
            self.held(&keys).await? == [false; 4],
            "a multi-key release left a key held",
        )
    }

    pub(super) async fn opposite_order_sets_complete(&self) -> Result<(), Violation> {
        let (x, y, z) = (self.key()?, self.key()?, self.key()?);
        let sets = [
            vec![x.clone(), y.clone()],
            vec![y.clone(), x.clone()],
            vec![y.clone(), z.clone(), x.clone()],
            vec![z.clone(), x.clone()],
        ];
        let waiting = AcquireOptions {
            timeout_ms: 20_000,
            retry_delay_ms: 5,
        };
        let callers = sets.iter().map(|set| async move {
            let multi = MultiLock::new(set.clone(), self.long(), self.store, self.runtime)
                .map_err(|e| self.fail(e.to_string()))?;
            for _ in 0..3 {
                let ran = multi
                    .run(waiting, |_| self.runtime.sleep(2))
                    .await
                    .map_err(|e| self.multi_failed("run", e))?;
                self.check(
                    ran.is_some(),
                    "a multi-key run waited 20 s for keys that others hold only briefly (deadlock?)",
                )?;
            }
            Ok::<(), Violation>(())
        });
        for outcome in join_all(callers.collect()).await {
            outcome?;
        }
        self.check(
            self.held(&[x, y, z]).await? == [false; 3],
            "keys still held after every multi-key run released",
        )
    }

    /// `acquire_many` of `keys`, each to the owner at its index, for the long TTL.
    async fn many(&self, keys: &[Key], owners: &[OwnerToken]) -> Result<ManyGrant, Violation> {
        self.store
            .acquire_many(keys, owners, self.long())
            .await
            .map_err(self.store_failed("acquireMany"))
    }

    /// `count` fresh keys, sorted, and an owner for each.
    fn set(&self, count: usize) -> Result<(Vec<Key>, Vec<OwnerToken>), Violation> {
        let mut keys = (0..count)
            .map(|_| self.key())
            .collect::<Result<Vec<_>, _>>()?;
        keys.sort();
        let owners = (0..count).map(|_| self.owner()).collect::<Result<_, _>>()?;
        Ok((keys, owners))
    }

    pub(super) async fn sets_taken_in_one_step_are_atomic(&self) -> Result<Verdict, Violation> {
        let (keys, owners) = self.set(3)?;
        let blocker = self.owner()?;
        // Beside one held key: refused, and nothing changed.
        self.check(
            self.acquire(&keys[1], &blocker, self.long()).await?,
            "acquire of a free key answered false",
        )?;
        match self.many(&keys, &owners).await? {
            ManyGrant::Unsupported => {
                self.release(&keys[1], &blocker).await?;
                return Ok(Verdict::NotApplicable(
                    "the store takes no set of keys in one step (no acquireMany): multi-key \
                     locks take one key at a time"
                        .into(),
                ));
            }
            ManyGrant::All(_) => {
                return Err(self.fail("acquireMany granted a set beside a held key"))
            }
            ManyGrant::Refused => {}
        }
        let left = self.held(&keys).await?;
        self.check(
            left == [false, true, false],
            &format!("a refused acquireMany changed keys: {left:?} read as held (only the second is, by another)"),
        )?;
        self.check(
            self.release(&keys[1], &blocker).await?,
            "a refused acquireMany took the held key from its holder",
        )?;
        // Free: every key granted, each to its own owner, with fences above the last.
        let before = self.grant(&keys[0], &blocker, self.long()).await?;
        self.release(&keys[0], &blocker).await?;
        let ManyGrant::All(grants) = self.many(&keys, &owners).await? else {
            return Err(self.fail("acquireMany of free keys was refused"));
        };
        self.check(
            grants.len() == 3,
            "acquireMany answered a grant count other than its key count",
        )?;
        self.check(
            self.held(&keys).await? == [true; 3],
            "a granted acquireMany left a key free",
        )?;
        if let (Some(before), Some(after)) = (before.and_then(|g| g.fence()), grants[0].fence()) {
            self.increases(before, after, "acquireMany after an acquire")?;
        }
        for (key, owner) in keys.iter().zip(&owners) {
            self.check(
                !self.release(key, &blocker).await?,
                "a stranger released a key acquireMany granted",
            )?;
            self.check(
                self.release(key, owner).await?,
                "the owner acquireMany granted a key to could not release it",
            )?;
        }
        // Overlapping sets at once: every pair shares a key, so exactly one is granted.
        let (keys, _) = self.set(3)?;
        let picks: [&[usize]; 4] = [&[0, 1], &[1, 2], &[0, 2], &[0, 1, 2]];
        let mut sets = Vec::new();
        for pick in picks {
            let set: Vec<Key> = pick.iter().map(|&i| keys[i].clone()).collect();
            let owners = pick
                .iter()
                .map(|_| self.owner())
                .collect::<Result<Vec<_>, _>>()?;
            sets.push((set, owners));
        }
        let answers = join_all(
            sets.iter()
                .map(|(set, owners)| self.many(set, owners))
                .collect(),
        )
        .await;
        let mut winners = Vec::new();
        for (answer, set) in answers.into_iter().zip(&sets) {
            if let ManyGrant::All(_) = answer? {
                winners.push(set);
            }
        }
        self.check(
            winners.len() == 1,
            &format!(
                "{} overlapping sets raced in acquireMany: {} granted, expected exactly 1",
                sets.len(),
                winners.len()
            ),
        )?;
        let (won, won_owners) = winners[0];
        let expected: Vec<bool> = keys.iter().map(|k| won.contains(k)).collect();
        self.check(
            self.held(&keys).await? == expected,
            "after racing sets, the keys held are not exactly the winner's",
        )?;
        for (key, owner) in won.iter().zip(won_owners) {
            self.release(key, owner).await?;
        }
        // A shared hold makes its key busy for a set, as for a lock.
        if self.keeps_shared_holds().await?.is_ok() {
            let (keys, owners) = self.set(2)?;
            let reader = self.owner()?;
            let SharedGrant::Granted(_) = self.shared(&keys[1], &reader, self.long(), 1, 2).await?
            else {
                return Err(self.fail("acquireShared of a free key was not granted"));
            };
            let answer = self.many(&keys, &owners).await?;
            self.check(
                answer == ManyGrant::Refused,
                &format!("acquireMany beside a permit answered {answer:?}, not refused"),
            )?;
            self.check(
                !self.is_locked(&keys[0]).await?,
                "acquireMany refused beside a permit left the free key held",
            )?;
            self.release(&keys[1], &reader).await?;
        }
        Ok(Verdict::Holds)
    }
}
