//! The multi-key properties: a [`MultiLock`] composed over the store's single-key operations
//! holds all of its keys or none, and overlapping sets taken in opposite orders all complete.

use std::fmt::Debug;

use super::{join_all, Ctx, Violation};
use crate::error::Error;
use crate::input::{AcquireOptions, Key};
use crate::lock::MultiLock;
use crate::runtime::Runtime;
use crate::store::LockStore;

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
}
