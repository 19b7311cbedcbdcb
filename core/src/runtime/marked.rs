//! A set of small indices (a shard's alarm targets, its backends), listed
//! in the order first marked: marking is a flag test, and visiting the
//! marked costs what was marked, not how many indices there are.

pub struct Marked {
    marked: Vec<bool>,
    list: Vec<usize>,
}

impl Marked {
    /// A set of indices below `n`.
    pub fn new(n: usize) -> Self {
        Self { marked: vec![false; n], list: Vec::new() }
    }

    pub fn mark(&mut self, i: usize) {
        if !std::mem::replace(&mut self.marked[i], true) {
            self.list.push(i);
        }
    }

    /// Every index marked since the last drain, each once, in the order
    /// first marked.
    pub fn drain(&mut self) -> impl Iterator<Item = usize> + '_ {
        let marked = &mut self.marked;
        self.list.drain(..).inspect(move |&i| marked[i] = false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_marked_index_comes_once_in_the_order_first_marked() {
        let mut m = Marked::new(4);
        for i in [2, 0, 2, 3, 0] {
            m.mark(i);
        }
        assert_eq!(m.drain().collect::<Vec<_>>(), vec![2, 0, 3]);
        assert_eq!(m.drain().count(), 0);
        m.mark(2);
        assert_eq!(m.drain().collect::<Vec<_>>(), vec![2], "drained, marked anew");
    }
}
