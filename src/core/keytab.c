/* Key table: MR and MW keys to objects, per context.
 *
 * Keys are drawn at random from the whole 32-bit space (DESIGN.md decision
 * 6), so a stale or guessed key fails; the table is an open-addressing hash
 * keyed by the key itself (already uniformly distributed). Readers (every
 * remote access) take the read lock; registration takes the write lock.
 */
#include "core/core.h"

#include <errno.h>
#include <stdlib.h>

#define KEY_EMPTY 0		/* 0 is never handed out */
#define KEY_TOMB  (-1)		/* kind of a deleted slot */

int keytab_init(struct sr_keytab *t)
{
	t->size = 64;
	t->used = t->tombs = 0;
	t->slots = calloc(t->size, sizeof(*t->slots));
	if (!t->slots)
		return -ENOMEM;
	pthread_rwlock_init(&t->lock, NULL);
	return 0;
}

void keytab_destroy(struct sr_keytab *t)
{
	free(t->slots);
	t->slots = NULL;
	pthread_rwlock_destroy(&t->lock);
}

static uint32_t key_hash(uint32_t key)
{
	/* Keys are random already, but MW type 2 keys differ only in their
	 * low byte from one bind to the next: mix. */
	key ^= key >> 16;
	key *= 0x45d9f3bU;
	key ^= key >> 16;
	return key;
}

struct sr_keyent *keytab_find_locked(struct sr_keytab *t, uint32_t key)
{
	uint32_t mask = t->size - 1;

	if (key == KEY_EMPTY)
		return NULL;
	for (uint32_t i = key_hash(key) & mask, n = 0; n < t->size; i = (i + 1) & mask, n++) {
		struct sr_keyent *e = &t->slots[i];

		if (e->key == KEY_EMPTY && e->kind != KEY_TOMB)
			return NULL;
		if (e->key == key && e->kind != KEY_TOMB)
			return e;
	}
	return NULL;
}

static int keytab_grow_locked(struct sr_keytab *t)
{
	uint32_t nsize = t->size;
	struct sr_keyent *old = t->slots, *ns;

	if ((t->used + 1) * 2 > t->size)
		nsize = t->size * 2;
	ns = calloc(nsize, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->size; i++) {
		if (old[i].key == KEY_EMPTY || old[i].kind == KEY_TOMB)
			continue;
		for (uint32_t j = key_hash(old[i].key) & (nsize - 1);; j = (j + 1) & (nsize - 1)) {
			if (ns[j].key == KEY_EMPTY) {
				ns[j] = old[i];
				break;
			}
		}
	}
	free(old);
	t->slots = ns;
	t->size = nsize;
	t->tombs = 0;
	return 0;
}

static int keytab_put_locked(struct sr_keytab *t, uint32_t key, int kind, void *obj)
{
	uint32_t mask;

	if (key == KEY_EMPTY)
		return -EINVAL;
	if (keytab_find_locked(t, key))
		return -EEXIST;
	if ((t->used + t->tombs + 1) * 4 > t->size * 3) {
		int ret = keytab_grow_locked(t);

		if (ret)
			return ret;
	}
	mask = t->size - 1;
	for (uint32_t i = key_hash(key) & mask;; i = (i + 1) & mask) {
		struct sr_keyent *e = &t->slots[i];

		if (e->key == KEY_EMPTY || e->kind == KEY_TOMB) {
			if (e->kind == KEY_TOMB)
				t->tombs--;
			e->key = key;
			e->kind = kind;
			e->obj = obj;
			t->used++;
			return 0;
		}
	}
}

int keytab_insert(struct sr_keytab *t, uint32_t key, int kind, void *obj)
{
	int ret;

	pthread_rwlock_wrlock(&t->lock);
	ret = keytab_put_locked(t, key, kind, obj);
	pthread_rwlock_unlock(&t->lock);
	return ret;
}

int keytab_insert_random(struct sr_keytab *t, int kind, void *obj, uint32_t *key)
{
	int ret;

	pthread_rwlock_wrlock(&t->lock);
	do {
		*key = sr_random32();
		ret = keytab_put_locked(t, *key, kind, obj);
	} while (ret == -EEXIST || ret == -EINVAL);
	pthread_rwlock_unlock(&t->lock);
	return ret;
}

int keytab_remove_locked(struct sr_keytab *t, uint32_t key)
{
	struct sr_keyent *e = keytab_find_locked(t, key);

	if (!e)
		return -ENOENT;
	e->key = KEY_EMPTY;
	e->kind = KEY_TOMB;
	e->obj = NULL;
	t->used--;
	t->tombs++;
	return 0;
}

int keytab_remove(struct sr_keytab *t, uint32_t key)
{
	int ret;

	pthread_rwlock_wrlock(&t->lock);
	ret = keytab_remove_locked(t, key);
	pthread_rwlock_unlock(&t->lock);
	return ret;
}
