package lease

// ParkedHead reports whether key's first waiter in m is parked: waiting
// without asking the database, so a commit can hand it the key.
func (m *Manager) ParkedHead(bucket, key string) bool {
	q := &m.queues
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.queues[[2]string{bucket, key}]
	return kq != nil && len(kq.ws) > 0 && kq.ws[0].ask != nil
}

// ClaimedHeadWaiting reports whether key's first waiter in m was claimed by
// a commit's hand-over and has stopped to wait for it (unparked).
func (m *Manager) ClaimedHeadWaiting(bucket, key string) bool {
	q := &m.queues
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.queues[[2]string{bucket, key}]
	return kq != nil && len(kq.ws) > 0 && kq.ws[0].claimed && kq.ws[0].ask == nil
}
