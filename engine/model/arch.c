/* arch.c - the architecture table (arch.h): one row per family, each
 * defined in its own arch_<family>.c. */
#include "engine/model/arch.h"

#include <string.h>

static const struct model_arch *const model_archs[] = {
	&model_arch_gemma3,
	&model_arch_llama,
	&model_arch_qwen2,
	&model_arch_mistral,
	&model_arch_phi3,
};

const struct model_arch *model_arch_find(const char *name)
{
	for (size_t i = 0; i < sizeof model_archs / sizeof model_archs[0]; i++)
		if (strcmp(model_archs[i]->name, name) == 0)
			return model_archs[i];
	return NULL;
}

const char *model_arch_names(void)
{
	return "gemma3, llama, qwen2, mistral, phi3";
}
