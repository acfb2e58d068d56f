/* router_w.c - where the trained router's weights live for a model and
 * how a SeKV session gets them (app.h): assets/router/MODEL.bin, MODEL the
 * model file's name without ".gguf", unless --router-weights says; the
 * file is checked against the model's fingerprint and shape
 * (train_weights_load, engine/train/train_io.c).
 */
#include "app/app.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "engine/train/train.h"

void app_router_weights_path(const struct app_opts *o, char *buf, size_t cap)
{
	char rel[1024];
	const char *base, *dot;
	size_t n;

	if (o->router_weights) {
		snprintf(buf, cap, "%s", o->router_weights);
		return;
	}
	base = strrchr(o->model, '/');
	base = base ? base + 1 : o->model;
	dot = strstr(base, ".gguf");
	n = dot ? (size_t)(dot - base) : strlen(base);
	snprintf(rel, sizeof rel, "assets/router/%.*s.bin", (int)(n < 900 ? n : 900), base);
	app_asset_path(rel, buf, cap);
}

int app_router_load(const struct app_opts *o, const struct model *m, int router,
		    struct sekv_router_w **out, char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	char path[4096];

	*out = NULL;
	if (router != SEKV_ROUTER_TRAINED)
		return 0;
	app_router_weights_path(o, path, sizeof path);
	if (access(path, F_OK) && errno == ENOENT)
		return sekv_errf(err, errlen, SEKV_EIO, "router weights: %s: no such file: 'sekv train -m %s%s%s' "
				 "trains the router of this model (minutes on two cores), or ask with --router "
				 "landmark (the untrained default)", path, o->model,
				 o->router_weights ? " --out " : "", o->router_weights ? o->router_weights : "");
	return train_weights_load(out, path, hp->fingerprint, hp->n_global, hp->n_head, hp->d_head, err,
				  errlen);
}
