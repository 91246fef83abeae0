//! Every async form `#[traced]` supports, built with `deny(warnings)`: the
//! traced futures stay `Send` (they go through `tokio::spawn`) and `?`,
//! `return` and elided lifetimes infer as in the undecorated fn.
#![deny(warnings)]

use fgtrace::traced;
use std::fmt::Display;
use std::num::ParseIntError;

#[traced]
async fn unit() {
    tokio::task::yield_now().await;
}

#[traced]
async fn parse_sum(a: &str, b: &str) -> Result<u32, ParseIntError> {
    let a: u32 = a.parse()?;
    if a == 0 {
        return Ok(0);
    }
    Ok(a + b.parse::<u32>()?)
}

/// `?` converts the error with `From`, which needs the output type pinned.
#[traced]
async fn boxed_error(s: String) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let n: u64 = s.trim().parse()?;
    if n > 10 {
        return Err("too big".into());
    }
    Ok(n)
}

#[traced]
async fn first_word(s: &str) -> &str {
    s.split(' ').next().unwrap_or_default()
}

#[traced]
async fn shown(n: u32) -> impl Display {
    n * 2
}

#[traced]
async fn option_of_impl(n: u32) -> Option<impl Display + Send> {
    let half = n.checked_div(2)?;
    Some(half)
}

#[traced]
async fn generic<T, E>(items: Vec<T>) -> Result<T, E>
where
    T: Send + Default,
    E: From<String>,
{
    tokio::task::yield_now().await;
    items
        .into_iter()
        .next()
        .ok_or_else(|| E::from("empty".to_string()))
}

#[traced]
async unsafe fn read(p: *const u32) -> u32 {
    *p
}

#[traced]
async fn destructure((a, b): (u32, u32), mut c: u32) -> u32 {
    c += a;
    c + b
}

struct Store {
    items: Vec<String>,
}

#[traced]
impl Store {
    pub async fn get(&self, i: usize) -> Option<&str> {
        tokio::task::yield_now().await;
        Some(self.items.get(i)?.as_str())
    }

    async fn push(&mut self, s: &str) -> &mut Self {
        self.items.push(s.to_string());
        self
    }

    async fn into_len(self: Box<Self>) -> usize {
        self.items.len()
    }

    // No import needed: the block's #[traced] removes it.
    #[notrace]
    async fn untraced(&self) -> usize {
        0
    }

    fn sync_too(&self) -> usize {
        self.items.len()
    }
}

trait Fetch {
    async fn fetch(&self, key: u32) -> Result<String, String>;
}

#[traced]
impl Fetch for Store {
    async fn fetch(&self, key: u32) -> Result<String, String> {
        let item = self.get(key as usize).await.ok_or("missing")?;
        Ok(item.to_uppercase())
    }
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[tokio::main]
async fn main() {
    tokio::spawn(unit()).await.unwrap();
    let sum = tokio::spawn(async { parse_sum("1", "2").await })
        .await
        .unwrap();
    assert_eq!(sum, Ok(3));
    assert!(parse_sum("x", "2").await.is_err());
    assert_eq!(assert_send(boxed_error(" 3 ".into())).await.unwrap(), 3);
    assert!(boxed_error("11".into()).await.is_err());
    assert_eq!(first_word("a b").await, "a");
    assert_eq!(shown(2).await.to_string(), "4");
    assert_eq!(option_of_impl(4).await.unwrap().to_string(), "2");
    assert_eq!(generic::<u8, String>(vec![1]).await, Ok(1));
    assert_eq!(unsafe { read(&7).await }, 7);
    assert_eq!(destructure((1, 2), 3).await, 6);

    let mut store = Store { items: vec![] };
    store.push("a").await.push("b").await;
    assert_eq!(store.get(1).await, Some("b"));
    assert_eq!(store.fetch(0).await, Ok("A".to_string()));
    assert_eq!(store.fetch(9).await, Err("missing".to_string()));
    assert_eq!(store.untraced().await + store.sync_too(), 2);
    let store = tokio::spawn(async move {
        assert_eq!(store.get(0).await, Some("a"));
        store
    })
    .await
    .unwrap();
    assert_eq!(Box::new(store).into_len().await, 2);
}
