//! Reading a file's events in order ([`Events`]), its chunks decoded a few
//! ahead on worker threads when there are cores for it.

use super::*;

/// Iterator over a file's events (see [`TraceReader::events`]).
pub struct Events<R> {
    pub(super) reader: TraceReader<R>,
    /// Where the buffers of kept chunks go back once read.
    pub(super) buffers: Option<crate::encoding::EventBuffers>,
    /// The current chunk's events; those before `pos` were handed out.
    pub(super) pending: Vec<Event>,
    pub(super) pos: usize,
    pub(super) failed: bool,
    pub(super) ahead: Option<Ahead>,
}

type Decoded = Result<Vec<Event>, TraceError>;

/// What an event handed out leaves in its place (nothing reads it).
const TAKEN: Event = Event::Lost(crate::Lost {
    thread: 0,
    depth: 0,
    at_ns: 0,
    count: 0,
    kind: crate::LossKind::Dropped,
});

/// Chunks being decoded on worker threads: each is numbered as it is read,
/// and its events are served in that order whatever finishes first.
pub(super) struct Ahead {
    /// Each job carries an emptied buffer to decode into.
    jobs: Option<std::sync::mpsc::SyncSender<(u64, Chunk, Vec<Event>)>>,
    /// Buffers whose events were all handed out, for the next jobs: a
    /// chunk's events are hundreds of KB, which the allocator would
    /// otherwise map and unmap for every chunk a worker decodes.
    spare: Vec<Vec<Event>>,
    results: std::sync::mpsc::Receiver<(u64, Decoded)>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Chunks handed out, and the number of the next one to serve.
    sent: u64,
    next: u64,
    ready: std::collections::BTreeMap<u64, Decoded>,
    /// The reader reached the end, or failed after the chunks sent.
    ended: bool,
    read_error: Option<TraceError>,
    window: u64,
}

impl Ahead {
    pub(super) fn new(workers: usize) -> Ahead {
        use std::sync::{mpsc, Arc, Mutex};
        let window = 2 * workers as u64 + 2;
        let (jobs, job_rx) = mpsc::sync_channel::<(u64, Chunk, Vec<Event>)>(window as usize);
        let (done, results) = mpsc::channel();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let workers = (0..workers)
            .filter_map(|_| {
                let (rx, done) = (job_rx.clone(), done.clone());
                std::thread::Builder::new()
                    .name("fgtrace-decode".into())
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((i, chunk, mut buf)) = job else { break };
                        let at = chunk.offset;
                        // A chunk that would panic the decoder must not leave
                        // the reader waiting for it.
                        let decoded = std::panic::catch_unwind(move || {
                            chunk.decode_into(&mut buf).map(|()| buf)
                        })
                        .unwrap_or_else(|_| {
                            Err(TraceError::Corrupt {
                                offset: at,
                                what: "chunk could not be decoded".into(),
                            })
                        });
                        if done.send((i, decoded)).is_err() {
                            break;
                        }
                    })
                    .ok()
            })
            .collect();
        Ahead {
            jobs: Some(jobs),
            spare: Vec::new(),
            results,
            workers,
            sent: 0,
            next: 0,
            ready: Default::default(),
            ended: false,
            read_error: None,
            window,
        }
    }

    /// The next chunk's events in the file's order, `None` after the last;
    /// a read error comes after every chunk read before it.
    fn next<R: Read>(&mut self, reader: &mut TraceReader<R>) -> Option<Decoded> {
        while !self.ended && self.sent - self.next < self.window {
            match reader.next_chunk() {
                Ok(Some(c)) if c.is_decoded() => {
                    self.ready.insert(self.sent, c.into_events(Vec::new()));
                    self.sent += 1;
                }
                Ok(Some(c)) => {
                    let buf = self.spare.pop().unwrap_or_default();
                    let sent = self.jobs.as_ref().map(|j| j.send((self.sent, c, buf)));
                    if let Some(Err(std::sync::mpsc::SendError((i, c, _)))) = sent {
                        // No worker is left (none could start): decode here.
                        self.ready.insert(i, c.decode());
                    }
                    self.sent += 1;
                }
                Ok(None) => self.ended = true,
                Err(e) => {
                    self.ended = true;
                    self.read_error = Some(e);
                }
            }
        }
        if self.next == self.sent {
            return self.read_error.take().map(Err);
        }
        let got = loop {
            if let Some(r) = self.ready.remove(&self.next) {
                break r;
            }
            match self.results.recv() {
                Ok((i, r)) => {
                    self.ready.insert(i, r);
                }
                // Every worker is gone (one panicked): say so, not hang.
                Err(_) => break Err(TraceError::Io(io::Error::other("a decoding thread failed"))),
            }
        };
        self.next += 1;
        Some(got)
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl<R: Read> Events<R> {
    /// Gives a batch's buffer back once its events were taken
    /// ([`Events::next_batch`]), to be filled again.
    pub fn recycle(&mut self, v: Vec<Event>) {
        if v.capacity() == 0 {
            return;
        }
        match (&self.buffers, &mut self.ahead) {
            (Some(b), _) => b.give(v),
            (None, Some(a)) if a.spare.len() < 4 => {
                let mut v = v;
                v.clear();
                a.spare.push(v);
            }
            _ => {}
        }
    }

    /// The rest of the current chunk's events, or the next chunk's, handed
    /// over whole: for a reader that takes events a chunk at a time rather
    /// than one by one (each moved out of the chunk). `None` after the last;
    /// a read error comes after every event before it, as from the iterator.
    pub fn next_batch(&mut self) -> Option<Result<Vec<Event>, TraceError>> {
        loop {
            if self.pos < self.pending.len() {
                let mut v = std::mem::take(&mut self.pending);
                v.drain(..self.pos);
                self.pos = 0;
                return Some(Ok(v));
            }
            match self.fill()? {
                Ok(()) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Reads the next chunk's events into `pending`: `None` at the end.
    fn fill(&mut self) -> Option<Result<(), TraceError>> {
        if self.failed {
            return None;
        }
        let done = std::mem::take(&mut self.pending);
        self.recycle(done);
        let next = match &mut self.ahead {
            Some(a) => a.next(&mut self.reader),
            None => self
                .reader
                .next_chunk()
                .and_then(|c| c.map(|c| c.into_events(Vec::new())).transpose())
                .transpose(),
        };
        match next {
            Some(Ok(evs)) => {
                self.pending = evs;
                self.pos = 0;
                Some(Ok(()))
            }
            None => None,
            Some(Err(e)) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl<R: Read> Iterator for Events<R> {
    type Item = Result<Event, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.pending.get_mut(self.pos) {
                self.pos += 1;
                return Some(Ok(std::mem::replace(e, TAKEN)));
            }
            match self.fill()? {
                Ok(()) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
